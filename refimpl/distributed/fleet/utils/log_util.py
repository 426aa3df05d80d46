"""The fleet logger's level: ``set_log_level``, ``get_log_level_code``, ``get_log_level_name``.

Mirrors ``python/paddle/distributed/fleet/utils/log_util.py`` (Paddle 3.3.1),
re-exported as ``paddle.distributed.fleet.set_log_level`` ... . The logger is
``refimpl.distributed.fleet``. Difference: bad levels are typed errors (an
``InvalidArgument`` that is also the ``AssertionError`` / ``ValueError``
Paddle raises).
"""
from __future__ import annotations

import logging
from typing import Union

from refimpl.core.errors import InvalidArgument

from ..base.compat_errors import InvalidArgumentAssertion

logger = logging.getLogger("refimpl.distributed.fleet")


def set_log_level(level: Union[str, int]) -> None:
    """Set the level of the ``refimpl.distributed.fleet`` logger (a name such as ``"debug"`` or an int)."""
    if not isinstance(level, (str, int)):
        raise InvalidArgumentAssertion(f"level's type must be str or int, got {type(level).__name__}")
    try:
        logger.setLevel(level if isinstance(level, int) else level.upper())
    except ValueError as exc:
        raise InvalidArgument(f"log_level: {exc}") from None


def get_log_level_code() -> int:
    return logger.getEffectiveLevel()


def get_log_level_name() -> str:
    return logging.getLevelName(get_log_level_code())


__all__ = ["set_log_level", "get_log_level_code", "get_log_level_name"]
