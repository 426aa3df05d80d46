"""Attributes: shape, rank ... (``paddle/tensor/attribute.py``)."""

__all__: list = []
