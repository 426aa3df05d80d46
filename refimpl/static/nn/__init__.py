"""``paddle.static.nn``: the static-graph layers, one module per family.

Paddle keeps them in ``python/paddle/static/nn/common.py`` (and ``control_flow.py``); refimpl splits
that file by family. Each submodule lists its public names in ``__all__``; this package re-exports them.
"""
from .common import *  # noqa: F401,F403  (fc, embedding, layer_norm, conv2d, batch_norm ...)
from .conv import *  # noqa: F401,F403  (conv2d_transpose, conv3d, conv3d_transpose)
from .norm import *  # noqa: F401,F403  (group_norm, instance_norm, prelu, spectral_norm)
from .extra import *  # noqa: F401,F403  (bilinear_tensor_product, py_func)

from refimpl.framework import namespace_getattr as _namespace_getattr  # noqa: E402
__getattr__ = _namespace_getattr(__name__)  # a Paddle name refimpl lacks: Unimplemented, naming it
