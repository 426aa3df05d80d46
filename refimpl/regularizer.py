"""``paddle.regularizer``: L1Decay and L2Decay (``paddle/regularizer.py``)."""

__all__: list = []
