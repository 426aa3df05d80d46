"""Cuda kernels of the tensor-parallel ops (placeholder)."""
