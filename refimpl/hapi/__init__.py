"""``paddle.hapi``: of Paddle's high-level API, only the training progress bar (``hapi.progressbar``)."""
from . import progressbar
from .progressbar import *  # noqa: F401,F403

__all__ = list(progressbar.__all__)
