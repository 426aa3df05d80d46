"""``paddle.nn.Layer`` and the layers (``paddle/nn/layer/``); each module lists its names in ``__all__``."""

__all__: list = []
