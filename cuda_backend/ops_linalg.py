"""CUDA kernels of ``refimpl/ops/linalg_ops.py``."""
