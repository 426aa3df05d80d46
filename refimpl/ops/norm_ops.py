"""Batch normalisation: batch_norm (+ grad), training and inference.

Mirrors Paddle's ops of the same names (paddle/phi/kernels/cpu/batch_norm_kernel.cc). Filled in op by op.
"""
