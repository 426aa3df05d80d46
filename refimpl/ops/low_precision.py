"""float16 / bfloat16 kernels: widen the inputs, run the float32 kernel, round the declared outputs.

Mirrors what Paddle's CPU kernels do for ``bfloat16`` (the Eigen and oneDNN
kernels of ``paddle/phi/kernels/cpu`` and ``paddle/phi/kernels/onednn``, which
the bf16 AMP programs of ``paddle.static.amp.bf16`` run): each low-precision
operand is widened exactly to float32, the op computes in float32, and each
result is rounded once (round to nearest even) to the dtype its variable
has in the program. Checked against Paddle 3.3.1 (CPU, one op at a time on
random bf16 inputs, bit for bit): ``mul`` and ``mul_grad``, ``matmul_v2`` and
its grad (2-D, batched, ``trans_y``), ``elementwise_add`` / ``_sub`` and their
grads (the bias gradient is a float32 sum rounded once), ``elementwise_mul``,
``relu``, ``gelu`` and their grads, ``sum`` (four inputs, one rounding),
``reshape2``, ``transpose2``, ``reduce_mean``, ``reduce_sum``, ``fill_constant``
(the value rounded once: a ``dtype`` attr naming float16 / bfloat16 makes the
kernel compute float32, :data:`DTYPE_ATTRS`); and ``scale``, whose ``scale`` /
``bias`` attrs Paddle first casts to the kernel's dtype (:data:`ATTRS_IN_T`).
Paddle 3.3.1 has no bf16 CPU kernel for ``softmax_grad`` or ``layer_norm`` (the
bf16 AMP lists keep them in float32); here they would compute the same way.
With Paddle 2.6.2's ``cast`` (``core/bfloat16.py``), the zoo's ``gpt_bf16``, which
2.6.2 recorded, gives its recorded forward values and losses bit for bit
through the first two steps.

Differences, all within one bf16 rounding of Paddle's value:

* ``elementwise_mul_grad``'s Y@GRAD of a broadcast Y, and ``matmul_v2_grad``'s
  Y@GRAD of a Y broadcast over X's batch: Paddle rounds the full-size
  product (``dout * x``; one ``x^T dout`` per batch) to bf16 before summing it
  in float32; here the float32 products are summed and rounded once.

A backend supplies the two conversions of its own arrays
(:func:`register_backend`): NumPy holds bfloat16 as ``ml_dtypes.bfloat16`` and
float16 as NumPy's; the CUDA backend holds bfloat16 as uint16 bit patterns
(``cuda_backend/ops_amp.py``). The wrapper is chosen when a block is
prepared, only for ops that have a float16/bfloat16 variable, so float32
programs run their kernels unwrapped; a program with no such variable at all
(:func:`program_has_low_precision`) is not looked at op by op.
"""
import functools
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from refimpl.core.bfloat16 import BFLOAT16, round_to_bfloat16

LOW_PRECISION = ("float16", "bfloat16")
# ops that handle low-precision dtypes themselves
NATIVE = frozenset({"cast", "coalesce_tensor"})  # coalesce_tensor: its outputs must stay views of the fused buffer
# attrs a Paddle kernel casts to its dtype T before computing (``scale``: ``static_cast<T>(scale)``)
ATTRS_IN_T = {"scale": ("scale", "bias")}
# attrs naming the dtype an op creates (``fill_constant``, the random initialisers): a low-precision
# one is computed as float32 and rounded on output, like any other result
DTYPE_ATTRS = ("dtype",)
_LOW_VARTYPES = (4, 22)  # float16, bfloat16
_FLOAT32 = 5


class Conversions:
    """One backend's ``widen(a)`` (a low-precision array as float32, anything else as it is) and
    ``round(a, dtype_name)`` (a float32 array rounded to "float16" / "bfloat16")."""

    def __init__(self, widen: Callable[[Any], Any], round: Callable[[Any, str], Any]) -> None:
        self.widen, self.round = widen, round


def _np_widen(a: Any) -> Any:
    if isinstance(a, np.ndarray) and (a.dtype == BFLOAT16 or a.dtype == np.float16):
        return a.astype(np.float32)
    return a


def _np_round(a: Any, dtype: str) -> Any:
    if isinstance(a, np.generic):  # a 0-d kernel result (np.float32 scalar) is rounded too
        a = np.asarray(a)
    if not isinstance(a, np.ndarray) or a.dtype.kind != "f":
        return a
    return round_to_bfloat16(a) if dtype == "bfloat16" else a.astype(np.float16)


_BACKENDS: Dict[str, Conversions] = {"numpy": Conversions(_np_widen, _np_round)}


def register_backend(backend: str, widen: Callable[[Any], Any], round: Callable[[Any, str], Any]) -> None:
    """Install ``backend``'s conversions (a device backend calls this when its kernels load)."""
    _BACKENDS[backend] = Conversions(widen, round)


def program_has_low_precision(program: Any) -> bool:
    """Whether any var of any block of ``program`` is float16 / bfloat16: when none is, no op needs the
    wrapper, and the executor skips :func:`wrap` (one pass over the vars instead of a lookup per op slot)."""
    return any(getattr(v, "dtype", None) in LOW_PRECISION for b in program.blocks for v in b.vars.values())


def _declared(block: Any, name: str) -> Optional[str]:
    var = block._find_var_recursive(name)
    return getattr(var, "dtype", None) if var is not None else None


def targets(op: Any, opdef: Any, block: Any) -> Optional[List[Any]]:
    """Per output slot, the low-precision dtype its var(s) are rounded to (a list for a duplicable slot);
    None when no input or output of ``op`` is a float16/bfloat16 variable (the kernel runs unwrapped)."""
    if op.type in NATIVE:
        return None
    names = [n for ns in list(op.inputs.values()) + list(op.outputs.values()) for n in ns]
    if not any(_declared(block, n) in LOW_PRECISION for n in names):
        return None
    out: List[Any] = []
    for slot in opdef.outputs:
        declared = [_declared(block, n) for n in op.outputs.get(slot.name) or []]
        dts = [d if d in LOW_PRECISION else None for d in declared]
        out.append(dts if slot.duplicable else (dts[0] if dts else None))
    return out


def wrap(fn: Callable[..., Any], kw: Dict[str, Any], op: Any, opdef: Any, block: Any,
         backend: str) -> Tuple[Callable[..., Any], Dict[str, Any]]:
    """The kernel and attrs to prepare ``op`` with: ``fn`` and ``kw`` themselves for a float32 op, else the
    widen / compute / round wrapper (see the module docstring) and the attrs Paddle casts to T, cast."""
    outs = targets(op, opdef, block)
    if outs is None:
        return fn, kw
    low = next((d for d in (_declared(block, n) for ns in op.inputs.values() for n in ns) if d in LOW_PRECISION),
               None)
    if any(kw.get(a) in _LOW_VARTYPES for a in DTYPE_ATTRS):  # the kernel makes float32, rounded on output
        kw = dict(kw, **{a: _FLOAT32 for a in DTYPE_ATTRS if kw.get(a) in _LOW_VARTYPES})
    if low is not None and op.type in ATTRS_IN_T:
        kw = dict(kw)
        for a in ATTRS_IN_T[op.type]:
            if a in kw:
                kw[a] = float(_np_round(np.array([kw[a]], np.float32), low)[0].astype(np.float32))
    return widened(fn, backend, outs, len(opdef.outputs) == 1), kw


def widened(fn: Callable[..., Any], backend: str, outs: List[Any], single: bool) -> Callable[..., Any]:
    """``fn`` computing in float32: low-precision inputs widened, output slot k rounded to ``outs[k]``
    (a dtype name, None to leave it, a list of those for a duplicable slot)."""
    conv = _BACKENDS[backend]
    widen, rnd = conv.widen, conv.round

    def round_slot(r: Any, dt: Any) -> Any:
        if isinstance(dt, list):
            return None if r is None else [x if d is None or x is None else rnd(x, d) for x, d in zip(r, dt)]
        return r if dt is None or r is None else rnd(r, dt)

    @functools.wraps(fn)
    def low_precision_kernel(*args: Any, **attrs: Any) -> Any:
        wide = [[widen(x) for x in a] if isinstance(a, list) else widen(a) for a in args]
        res = fn(*wide, **attrs)
        if single:
            return round_slot(res, outs[0])
        return tuple(round_slot(r, d) for r, d in zip(res, outs))
    return low_precision_kernel


__all__: list = []
