"""Creation: full, zeros, ones, arange, eye, full_like, zeros_like, ones_like, tril, triu, assign (``paddle/tensor/creation.py``)."""

__all__: list = []
