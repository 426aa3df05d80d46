"""Comparison and logical functions: greater_than, logical_and ... (``paddle/tensor/logic.py``)."""

__all__: list = []
