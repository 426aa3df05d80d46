"""Statistics (``paddle/tensor/stat.py``)."""

__all__: list = []
