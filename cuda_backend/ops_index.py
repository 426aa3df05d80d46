"""CUDA kernels for the ops of ``refimpl/ops/index_ops.py``.

Mirrors Paddle's GPU kernels of the same names (``paddle/phi/kernels/gpu``). Filled in op by op.
"""
