"""Linear algebra: bmm ... (``paddle/tensor/linalg.py``)."""

__all__: list = []
