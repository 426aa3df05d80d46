"""The ``print`` op: write a tensor's name, metadata and first values to stdout, pass it on.

Mirrors ``paddle/fluid/operators/print_op.cc`` (and ``TensorFormatter`` in
``paddle/fluid/operators/tensor_formatter.cc``): ``Out`` is ``In``; each run
prints, unless ``first_n`` (> 0) runs have printed already, when the op's phase
(``is_forward``) is one ``print_phase`` allows::

    Variable: fc_0.tmp_1
      - message: ...
      - lod: {}
      - place: Place(cpu)
      - shape: [2, 3]
      - layout: NCHW
      - dtype: float32
      - data: [0.000000 1.000000 ...]

(the first ``summarize`` values, -1 for all, each as ``%f`` of its float32 value).
``Out`` is a copy of ``In``, as Paddle's ``TensorCopy``. Its grad op is
a ``print`` of ``Out@GRAD`` into ``In@GRAD`` with ``is_forward=False``.

Like ``feed`` and ``fetch`` it is an op of the executor, built by a
``prepare`` hook instead of a kernel per backend: the hook keeps the op's
own run count for ``first_n`` (Paddle's op instance does the same) and
reads device values through ``to_host``, so both backends print alike.
"""
import sys

import numpy as np

from refimpl.core.device import to_device, to_host
from refimpl.core.errors import InvalidArgument

from .common import first
from .registry import register_op

PRINT_ATTRS = {"first_n": -1, "message": "", "summarize": 20, "print_tensor_name": True,
               "print_tensor_type": True, "print_tensor_shape": True, "print_tensor_layout": True,
               "print_tensor_lod": True, "print_phase": "BOTH", "is_forward": True}
PHASES = ("FORWARD", "BACKWARD", "BOTH")


def format_tensor(name: str, value: np.ndarray, attrs: dict, place: str) -> str:
    """The text Paddle's ``TensorFormatter`` prints for one tensor."""
    lines = [f"Variable: {name}"] if attrs["print_tensor_name"] else []
    if attrs["message"]:
        lines.append(f"  - message: {attrs['message']}")
    if attrs["print_tensor_lod"]:
        lines.append("  - lod: {}")
    lines.append(f"  - place: {place}")
    if attrs["print_tensor_shape"]:
        lines.append(f"  - shape: [{', '.join(str(d) for d in value.shape)}]")
    if attrs["print_tensor_layout"]:
        lines.append("  - layout: NCHW")
    if attrs["print_tensor_type"]:
        lines.append(f"  - dtype: {value.dtype.name}")
    n = value.size if attrs["summarize"] == -1 else min(value.size, attrs["summarize"])
    shown = value.reshape(-1)[:n].astype(np.float32)  # Paddle formats every dtype through float
    lines.append(f"  - data: [{' '.join('%f' % v for v in shown)}]")
    return "\n".join(lines) + "\n"


def _infer(ins, attrs):
    if attrs.get("print_phase", "BOTH") not in PHASES:
        raise InvalidArgument(f"print: print_phase must be one of {list(PHASES)}, got {attrs['print_phase']!r}")
    return {"Out": first(ins, "In")}


def _grad_maker(g):
    return [g.op("print", {"In": g.output_grad("Out")}, {"Out": g.input_grad("In")},
                 g.attrs(is_forward=False))]


def _prepare_print(ctx, op):
    src, out = ctx.tensor(op.input("In")[0]), ctx.tensor(op.output("Out")[0])
    name = op.input("In")[0]
    attrs = {k: op.attr(k) for k in PRINT_ATTRS}
    phase = "FORWARD" if attrs["is_forward"] else "BACKWARD"
    place = "Place(cpu)" if ctx.backend == "numpy" else "Place(gpu:0)"
    mem = ctx.memory
    runs = [0]

    def run():
        if src._array is None:
            raise InvalidArgument(f"print: input {name!r} holds no value")
        host = np.asarray(to_host(src._array))
        if attrs["print_phase"] in (phase, "BOTH") and (attrs["first_n"] <= 0 or runs[0] < attrs["first_n"]):
            sys.stdout.write(format_tensor(name, host, attrs, place))
        runs[0] += 1
        old = out._array
        # a copy, as Paddle's TensorCopy: an in-place update of In later (sgd) must not change Out
        out._array = host.copy() if ctx.backend == "numpy" else to_device(host, ctx.backend)
        mem.live += out._array.nbytes - (old.nbytes if old is not None else 0)
    return run


register_op("print", ["In"], ["Out"], PRINT_ATTRS, infer_shape=_infer, grad=_grad_maker,
            prepare=_prepare_print)
