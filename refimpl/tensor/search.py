"""Search: where, argmax, argmin, topk, index_select-like lookups (``paddle/tensor/search.py``)."""

__all__: list = []
