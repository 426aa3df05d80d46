"""Normalisation: layer_norm, batch_norm (``paddle/nn/functional/norm.py``)."""

__all__: list = []
