"""``paddle.static.accuracy`` (``paddle/static/nn/metric.py``)."""

__all__: list = []
