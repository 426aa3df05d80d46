"""``paddle.nn.ClipGradByGlobalNorm``, ``ClipGradByNorm``, ``ClipGradByValue`` (``paddle/nn/clip.py``)."""

__all__: list = []
