"""Tensor-parallel ops (placeholder: filled in by the model-parallel ops work)."""
