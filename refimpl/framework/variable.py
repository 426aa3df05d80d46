"""Variable and Parameter: the static description of a tensor in a Block.

Mirrors ``paddle.base.framework.Variable`` / ``Parameter`` (legacy IR): a
name, a shape with -1 for unknown dims, a dtype, and flags. It holds no
data; values live in a Scope at run time. Arithmetic operators (``x @ w``,
``x + y``, ``x * 2.0``) are patched on by ``refimpl.tensor`` as Paddle's
``math_op_patch`` does. ``str`` / ``repr`` / ``to_string`` give Paddle
3.3.1's text (``program_text.py``); ``clone`` / ``detach`` / ``size`` /
``cpu`` append the ops Paddle appends (``assign``, ``share_data``, ``size``,
``memcpy``), named from the program's own counters as in Paddle.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, TYPE_CHECKING

import numpy as np

from refimpl.core.dtypes import convert_dtype, to_numpy_dtype
from refimpl.core.errors import InvalidArgument, NotFound

if TYPE_CHECKING:
    from .block import Block

__all__ = ["Variable", "Parameter", "PaddleText", "VariableNotFound", "BadValue", "BadType",
           "DENSE_TENSOR", "VAR_TYPES"]

DENSE_TENSOR = "DENSE_TENSOR"
VAR_TYPES = ("DENSE_TENSOR", "SELECTED_ROWS", "DENSE_TENSOR_ARRAY", "STEP_SCOPES",
             "FEED_MINIBATCH", "FETCH_LIST", "READER", "RAW")


class PaddleText:
    """Mixin for an error that shows Paddle's own message, as its builtin error prints it (no "(kind)" prefix)."""

    def __str__(self) -> str:
        args = getattr(self, "args", ())
        return str(args[0]) if args else ""


class VariableNotFound(PaddleText, NotFound, ValueError):
    """A variable missing from a block or scope: Paddle raises ``ValueError`` there."""


class BadValue(PaddleText, InvalidArgument):
    """A value Paddle rejects with a ``ValueError`` whose message a script may print."""


class BadType(PaddleText, InvalidArgument, TypeError):
    """A value of a type Paddle rejects with a ``TypeError`` whose message a script may print."""


class Variable:
    def __init__(self, block: Block, name: str, shape: Optional[Sequence[int]] = None,
                 dtype: Any = None, type: str = DENSE_TENSOR, persistable: bool = False,
                 stop_gradient: bool = False, is_data: bool = False, need_check_feed: bool = False,
                 lod_level: Optional[int] = None, **_ignored: Any) -> None:
        self.block = block
        self.name = name
        self.type = type
        self.shape = tuple(int(d) for d in shape) if shape is not None else None
        self.dtype = convert_dtype(dtype) if dtype is not None else None
        self.persistable = bool(persistable)
        self.stop_gradient = bool(stop_gradient)
        self.is_data = bool(is_data)
        self.need_check_feed = bool(need_check_feed)
        self.lod_level = int(lod_level or 0)
        self.op = None  # the last op that wrote it while building

    is_parameter = False
    trainable = False
    is_distributed = False  # True for a tensor-parallel shard (Paddle's Variable.is_distributed)

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

    # ---- Paddle's Variable API -----------------------------------------
    def ndimension(self) -> int:
        return len(self.shape or ())

    dim = ndimension

    @property
    def grad_name(self) -> str:
        """The name the gradient of this variable gets (``x@GRAD``), whether it exists or not."""
        return self.name + "@GRAD"

    def element_size(self) -> int:
        """Bytes of one element of the dtype (4 for float32)."""
        return int(to_numpy_dtype(self.dtype).itemsize) if self.dtype != "bfloat16" else 2

    def _derived(self, key: str, **var_kw: Any) -> Variable:
        return self.block.create_var(name=self.block.program.fresh_name(key, self.block), **var_kw)

    def clone(self) -> Variable:
        """A copy by an ``assign`` op, named ``{name}_clone_k`` (gradients flow through it)."""
        out = self._derived(self.name + "_clone", dtype=self.dtype, type=self.type,
                            persistable=self.persistable, stop_gradient=self.stop_gradient)
        self.block.append_op(type="assign", inputs={"X": [self]}, outputs={"Out": [out]})
        return out

    def detach(self) -> Variable:
        """``detach_{name}_k``, sharing the data by ``share_data``, with no gradient."""
        if self.type not in ("DENSE_TENSOR", "SELECTED_ROWS"):
            raise InvalidArgument(f"Variable.detach: {self.name!r} is a {self.type}; "
                                  "only DENSE_TENSOR and SELECTED_ROWS can be detached")
        out = self._derived("detach_" + self.name, dtype=self.dtype,
                            type=self.type, persistable=self.persistable, stop_gradient=True)
        self.block.append_op(type="share_data", inputs={"X": [self]}, outputs={"Out": [out]})
        return out

    def size(self) -> Variable:
        """The number of elements, an int64 0-D ``{name}_size_k`` computed by the ``size`` op."""
        out = self._derived(self.name + "_size", dtype="int64")
        self.block.append_op(type="size", inputs={"Input": [self]}, outputs={"Out": [out]})
        return out

    def cpu(self) -> Variable:
        """A ``memcpy`` to the CPU (``dst_place_type = 0``) into a ``tmp_k``."""
        block = self.block.program.current_block()
        out = block.create_var(name=block.program.fresh_name("tmp", block), dtype=self.dtype,
                               shape=self.shape, type=self.type, persistable=False, stop_gradient=True)
        block.append_op(type="memcpy", inputs={"X": [self]}, outputs={"Out": [out]},
                        attrs={"dst_place_type": 0})
        return out

    def _scope_tensor(self, api: str, scope: Any) -> Any:
        from refimpl.core.scope import Scope, global_scope
        if scope is not None and not isinstance(scope, Scope):
            raise InvalidArgument(f"Variable.{api}: scope must be None or a Scope, got {type(scope).__name__}")
        holder = (scope if scope is not None else global_scope()).find_var(self.name)
        if holder is None:
            raise VariableNotFound(f"Can not find Variable '{self.name}' in the Scope.")
        return holder.get_tensor()

    def get_value(self, scope: Any = None) -> Any:
        """The DenseTensor holding this variable in ``scope`` (default: the global scope)."""
        return self._scope_tensor("get_value", scope)

    def set_value(self, value: Any, scope: Any = None) -> None:
        """Write ``value`` (an array, or a tensor) into this variable's tensor in ``scope``."""
        if not (isinstance(value, np.ndarray) or hasattr(value, "__array__")):
            raise BadType(f"`value` should be `numpy.ndarray` or `DenseTensor`, but received {type(value)}.")
        t = self._scope_tensor("set_value", scope)
        value = np.asarray(value)
        if t._is_initialized() and list(t.shape()) != list(value.shape):
            raise BadValue(f"{self.name} expected a shape {list(t.shape())}, "
                           f"but the received shape is {list(value.shape)}.")
        t.set(value)

    # ---- text -----------------------------------------------------------
    def to_string(self, throw_on_error: bool, with_details: bool = False) -> str:
        """The ``VarDesc`` protobuf text (with ``with_details``: also error_clip and the parameter attrs)."""
        from .program_text import var_to_proto_text
        if not isinstance(throw_on_error, bool) or not isinstance(with_details, bool):
            raise InvalidArgument(f"Variable.to_string: throw_on_error and with_details must be bools, "
                                  f"got {throw_on_error!r}, {with_details!r}")
        return var_to_proto_text(self, with_details)

    def __str__(self):
        from .program_text import var_to_readable
        return var_to_readable(self)

    __repr__ = __str__

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
        self.do_model_average = kw.get("do_model_average", True)
