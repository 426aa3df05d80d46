"""Variable and Parameter: the static description of a tensor in a Block.

Mirrors ``paddle.base.framework.Variable`` / ``Parameter`` (legacy IR): a
name, a shape with -1 for unknown dims, a dtype, and flags. It holds no
data; values live in a Scope at run time. Arithmetic operators (``x @ w``,
``x + y``, ``x * 2.0``) are patched on by ``refimpl.tensor`` as Paddle's
``math_op_patch`` does.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, TYPE_CHECKING

from refimpl.core.dtypes import convert_dtype

if TYPE_CHECKING:
    from .block import Block

DENSE_TENSOR = "DENSE_TENSOR"
VAR_TYPES = ("DENSE_TENSOR", "SELECTED_ROWS", "DENSE_TENSOR_ARRAY", "STEP_SCOPES",
             "FEED_MINIBATCH", "FETCH_LIST", "READER", "RAW")


class Variable:
    def __init__(self, block: Block, name: str, shape: Optional[Sequence[int]] = None,
                 dtype: Any = None, type: str = DENSE_TENSOR, persistable: bool = False,
                 stop_gradient: bool = False, is_data: bool = False, need_check_feed: bool = False,
                 **_ignored: Any) -> None:
        self.block = block
        self.name = name
        self.type = type
        self.shape = tuple(int(d) for d in shape) if shape is not None else None
        self.dtype = convert_dtype(dtype) if dtype is not None else None
        self.persistable = bool(persistable)
        self.stop_gradient = bool(stop_gradient)
        self.is_data = bool(is_data)
        self.need_check_feed = bool(need_check_feed)
        self.op = None  # the last op that wrote it while building

    is_parameter = False
    trainable = False

    @property
    def ndim(self) -> int:
        return len(self.shape) if self.shape is not None else 0

    def _to_dict(self):
        d = {"name": self.name, "type": self.type,
             "persistable": self.persistable, "stop_gradient": self.stop_gradient,
             "is_parameter": self.is_parameter, "is_data": self.is_data}
        if self.shape is not None:
            d["shape"] = list(self.shape)
        if self.dtype is not None:
            d["dtype"] = self.dtype
        return d

    def _flags(self):
        return "".join(f for f, on in (("persist ", self.persistable),
                                        ("trainable param ", self.is_parameter and getattr(self, "trainable", False)),
                                        ("data ", self.is_data)) if on)

    def __str__(self):
        shape = ", ".join(str(d) for d in self.shape) if self.shape is not None else "?"
        return (f"{self._flags()}var {self.name} : {self.type}.shape({shape})"
                f".dtype({self.dtype}).stop_gradient({self.stop_gradient})")

    def __repr__(self):
        return f"Variable({self.name!r}, shape={list(self.shape) if self.shape is not None else None}, dtype={self.dtype})"

    def __hash__(self):
        return id(self)


class Parameter(Variable):
    """A persistable, trainable Variable of the global block."""

    is_parameter = True

    def __init__(self, block: Block, name: str, shape: Sequence[int], dtype: Any,
                 trainable: bool = True, optimize_attr: Optional[Dict[str, Any]] = None,
                 regularizer: Any = None, need_clip: bool = True, **kw: Any) -> None:
        kw.setdefault("persistable", True)
        kw.setdefault("stop_gradient", not trainable)
        super().__init__(block, name, shape=shape, dtype=dtype, **kw)
        self.trainable = bool(trainable)
        self.optimize_attr = optimize_attr or {"learning_rate": 1.0}
        self.regularizer = regularizer
        self.need_clip = need_clip
