"""Convolutions: conv2d (``paddle/nn/functional/conv.py``)."""

__all__: list = []
