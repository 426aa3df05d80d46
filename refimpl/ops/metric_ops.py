"""Metric ops: accuracy (Paddle ``paddle/phi/kernels/cpu/accuracy_kernel.cc``)."""
