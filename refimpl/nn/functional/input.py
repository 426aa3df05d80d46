"""Inputs: embedding, one_hot (``paddle/nn/functional/input.py``)."""

__all__: list = []
