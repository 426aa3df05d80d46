"""CUDA kernels of ``refimpl/ops/metric_ops.py``."""
