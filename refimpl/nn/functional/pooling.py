"""Pooling: max_pool2d, avg_pool2d, adaptive_avg_pool2d (``paddle/nn/functional/pooling.py``)."""

__all__: list = []
