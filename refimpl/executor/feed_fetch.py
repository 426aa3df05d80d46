"""Feeds and fetches of ``Executor.run``: the checks of ``paddle.static.Executor``'s ``feed`` and ``fetch_list``.

Mirrors the checks in ``python/paddle/base/executor.py`` (``_check_fetch_list``,
``check_feed_shape_type``): a fetch must name a variable of the program; a feed
must name one, be numbers or booleans (ragged lists, strings and objects are
``InvalidArgument``) and fit the variable's dtype and (for data variables) its
rank and fixed dims. Unlike Paddle, a Python list feed is converted to the
variable's dtype instead of being refused.

A program that carries its own ``feed`` / ``fetch`` ops (``normalize_program``,
``deserialize_program``, an inference program) runs as Paddle runs it
(``has_feed_operators`` / ``has_fetch_operators`` in ``executor.py``): it is fed
by the names the feed ops write, and with no ``fetch_list`` it fetches what
its fetch ops read, in their ``col`` order. :func:`without_feed_fetch_ops`
gives the program the interpreter runs for it.
"""
from typing import Any, Dict, List, Optional

import numpy as np

from refimpl.core.bfloat16 import BFLOAT16, from_bits, round_to_bfloat16
from refimpl.core.errors import InvalidArgument, NotFound
from refimpl.core.tensor import DenseTensor
from refimpl.framework.program import Program
from refimpl.framework.variable import Variable


def name_of(v: Any) -> Optional[str]:
    """The name of a Variable, or the string itself."""
    return v if isinstance(v, str) else getattr(v, "name", None)


def fetch_names(program: Program, fetch_list: Any) -> List[str]:
    """The variable names of ``fetch_list`` (Variables or names), each checked to exist in ``program``."""
    if fetch_list is None:
        return []
    if not isinstance(fetch_list, (list, tuple)):
        fetch_list = [fetch_list]
    names = []
    for f in fetch_list:
        name = name_of(f)
        if not isinstance(name, str):
            raise InvalidArgument(f"fetch_list items must be Variables or names, got {type(f).__name__}")
        if program.global_block()._find_var_recursive(name) is None:
            raise NotFound(f"fetch {name!r} is not a variable of the program")
        names.append(name)
    return names


FEED_FETCH_OPS = ("feed", "fetch", "fetch_v2")


def without_feed_fetch_ops(program: Program) -> Optional[tuple]:
    """``(program without its feed/fetch ops, the fetch ops' targets by col)``; None when it has none."""
    ops = program.global_block().ops
    if not any(op.type in FEED_FETCH_OPS for op in ops):
        return None
    fetches = sorted((op.attr("col"), op.input("X")[0]) for op in ops if op.type in ("fetch", "fetch_v2"))
    bare = program.clone()
    block = bare.global_block()
    for i in reversed(range(len(block.ops))):
        if block.ops[i].type in FEED_FETCH_OPS:
            block._remove_op(i)
    return bare, [name for _, name in fetches]


def check_feed(program: Program, feed: Optional[Dict[str, Any]]) -> Dict[str, np.ndarray]:
    """Validate ``feed`` against ``program``; return {name: ndarray}."""
    if feed is None:
        return {}
    if not isinstance(feed, dict):
        raise InvalidArgument(f"feed must be a dict {{name: array}}, got {type(feed).__name__}")
    block = program.global_block()
    out = {}
    for key, value in feed.items():
        name = name_of(key)
        var = block.vars.get(name) if isinstance(name, str) else None
        if not isinstance(name, str) or var is None:
            raise NotFound(f"feed {key if name is None else name!r} is not a variable of the program "
                           f"(known data vars: {sorted(v.name for v in block.vars.values() if v.is_data)})")
        arr = feed_array(name, var, value)
        if var.dtype == "bfloat16":
            out[name] = _checked_shape(name, var, bfloat16_feed(name, arr, value))
            continue
        if var.dtype is not None and arr.dtype != np.dtype(var.dtype):
            if isinstance(value, (np.ndarray, DenseTensor)):
                raise InvalidArgument(f"feed {name!r}: dtype {arr.dtype} does not match the variable's "
                                      f"dtype {var.dtype}")
            arr = arr.astype(var.dtype)
        out[name] = _checked_shape(name, var, arr)
    return out


def _checked_shape(name: str, var: Variable, arr: np.ndarray) -> np.ndarray:
    if var.shape is not None and (var.is_data or var.need_check_feed):
        if arr.ndim != len(var.shape) or any(d >= 0 and d != a for d, a in zip(var.shape, arr.shape)):
            raise InvalidArgument(f"feed {name!r}: shape {list(arr.shape)} does not match the variable's "
                                  f"shape {list(var.shape)} (-1 matches any size)")
    return arr


def bfloat16_feed(name: str, arr: np.ndarray, value: Any) -> np.ndarray:
    """A feed of a bfloat16 variable: Paddle takes uint16 bit patterns (refimpl also takes ml_dtypes bfloat16
    arrays, and rounds a Python list); another array dtype is refused, as Paddle refuses it."""
    if arr.dtype == BFLOAT16:
        return arr
    if arr.dtype == np.uint16:
        return from_bits(arr)
    if not isinstance(value, (np.ndarray, DenseTensor)) and arr.dtype.kind in "biuf":
        return round_to_bfloat16(arr)
    raise InvalidArgument(f"feed {name!r}: the data type of a fed bfloat16 variable must be 'uint16' (its bit "
                          f"patterns, as in Paddle) or bfloat16, got {arr.dtype}")


def feed_array(name: str, var: Variable, value: Any) -> np.ndarray:
    """``value`` as an array of numbers (or booleans): ragged lists, strings and objects are refused."""
    if isinstance(value, DenseTensor):
        value = np.asarray(value)
    try:
        arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    except ValueError as exc:  # NumPy: nested lists of different lengths
        raise InvalidArgument(f"feed {name!r}: a ragged list (rows of different lengths) is not a tensor: "
                              f"{exc}") from None
    if arr.dtype.kind in "OUSV" and arr.dtype != BFLOAT16 and var.type == "DENSE_TENSOR":
        what = "Python objects" if arr.dtype.kind in "OV" else "strings"
        raise InvalidArgument(f"feed {name!r}: holds {what} (dtype {arr.dtype}); a tensor feed holds numbers "
                              f"or booleans (dtype {var.dtype})")
    return arr
