"""``paddle.nn.Layer`` and the layers (``paddle/nn/layer/``); each module lists its names in ``__all__``."""
from .layers import *  # noqa: F401,F403
from .container import *  # noqa: F401,F403
from .common import *  # noqa: F401,F403
from .activation import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
from .norm import *  # noqa: F401,F403
from .pooling import *  # noqa: F401,F403
from .bilinear import *  # noqa: F401,F403
from .loss import *  # noqa: F401,F403
from . import layers, container, common, activation, conv, norm, pooling, bilinear, loss

__all__ = (layers.__all__ + container.__all__ + common.__all__ + activation.__all__ + conv.__all__
           + norm.__all__ + pooling.__all__ + bilinear.__all__ + loss.__all__)
