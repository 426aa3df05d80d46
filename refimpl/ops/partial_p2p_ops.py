"""partial_send, partial_recv, partial_allgather: moving a tensor between pipeline stages in slices.

Mirrors Paddle 3.3.1's ``paddle/fluid/operators/collective/partial_send_op.cc``,
``partial_recv_op.cc`` and ``partial_allgather_op.cc`` (slots, attrs, defaults, InferShape checks)
and their GPU kernels ``paddle/phi/kernels/gpu/partial_{send,recv,allgather}_kernel.cu``
(semantics and run-time checks). Paddle's legacy static pipeline
(``paddle/incubate/optimizer/pipeline.py``, ``_insert_sendrecv_ops_for_boundaries``) uses them when
tensor parallelism lives inside the stages: model-parallel rank ``k`` of the sending stage sends
slice ``k`` of ``num`` equal slices of the flattened tensor, its peer of the receiving stage
receives it into slice ``k`` of a full-size output, and ``partial_allgather`` (in place, X and
Out the same variable) gathers the slices over the model-parallel ring, so every rank of the
receiving stage holds the whole tensor.

* ``partial_send`` (X; attrs ring_id 0, peer 0, num 1, id 0): sends elements
  ``[id * n / num, (id + 1) * n / num)`` of flattened X (``n`` = X's numel) to ``peer``;
* ``partial_recv`` (-> Out; attrs ring_id 0, peer 0, dtype 5 (float32), out_shape [], num 1,
  id 0): Out has ``out_shape`` and ``dtype``; slice ``id`` of its ``num`` slices is received from
  ``peer``;
* ``partial_allgather`` (X -> Out; attrs nranks, rank (both required, no default), ring_id 0):
  slice ``rank`` of flattened X from every rank of the ring, in ring order, laid end to end and
  shaped as X. In-place pair Out <- X, as Paddle declares.

None has a grad op (Paddle registers them without gradient / with an empty grad maker). Checks,
as Paddle's: at build time (infer-shape) peer / ring_id >= 0, num >= 1, 0 <= id < num, every
``out_shape`` dim >= 1 and its numel divisible by num, nranks >= 2 and 0 <= rank < nranks; when
the kernel runs, X's numel divisible by num (by nranks), peer below the ring's size, nranks /
rank equal to the ring's. Each error is typed and names the op.

Differences from Paddle. Paddle 3.3.1 has no CPU kernels for these ops (they raise Unavailable);
refimpl runs them on every backend through the rank's communicator. Attr ``use_calc_stream``,
which ``pipeline.py`` passes, is not in 3.3.1's protos (Paddle's Python drops it; refimpl keeps
an undeclared attr, unread); there are no streams here anyway. The parts of ``partial_recv``'s
Out that are not received are zeros (Paddle leaves whatever the output's memory held); the
pipeline always follows it with ``partial_allgather``, which overwrites all of them. A slice
whose shape or dtype differs from what the receiver expects (sender and receiver disagreeing
on num, or on the tensor) is an InvalidArgument naming ``partial_recv``, where NCCL would read
garbage or hang. ``partial_send`` / ``partial_recv`` record ``send`` / ``recv`` events with the
bytes of the slice moved (not of the whole tensor) into the executor's trace.
"""
from typing import Any, Callable, Sequence, Tuple

import numpy as np

from refimpl.core import comm_context
from refimpl.core.dtypes import VARTYPE_TO_NAME, to_numpy_dtype
from refimpl.core.errors import InvalidArgument

from .collective_ops import _prepare_comm
from .common import first
from .model_parallel_ops import check_ring, ring
from .registry import register_op

PARTIAL_P2P_OPS = ("partial_send", "partial_recv", "partial_allgather")

__all__ = ["PARTIAL_P2P_OPS", "check_p2p_attrs", "slice_plan", "check_out_shape", "check_gather_attrs",
           "gather_plan", "checked_peer", "named", "send_part", "recv_part"]


# ---- shared checks (every backend's kernels use these) ----------------------------------------
def check_p2p_attrs(op: str, ring_id: int, peer: int, num: int, id: int) -> None:
    """Paddle's InferShape checks of partial_send / partial_recv."""
    if peer < 0:
        raise InvalidArgument(f"{op}: attr peer ({peer}) must be non-negative")
    if ring_id < 0:
        raise InvalidArgument(f"{op}: attr ring_id ({ring_id}) must be non-negative")
    if num < 1:
        raise InvalidArgument(f"{op}: attr num ({num}) must be >= 1")
    if not 0 <= id < num:
        raise InvalidArgument(f"{op}: attr id ({id}) must be >= 0 and < num ({num})")


def slice_plan(op: str, numel: int, num: int, id: int, what: str = "input") -> Tuple[int, int]:
    """(offset, size) of slice ``id`` of ``num`` equal slices of ``numel`` elements, checked."""
    if numel % num:
        raise InvalidArgument(f"{op}: the {what} numel ({numel}) must be divisible by num ({num})")
    size = numel // num
    return size * id, size


def check_out_shape(op: str, out_shape: Sequence[int], num: int) -> Tuple[int, ...]:
    """partial_recv's ``out_shape``: set, every dim >= 1, numel divisible by num; as a tuple."""
    shape = tuple(int(d) for d in (out_shape or ()))
    if not shape:
        raise InvalidArgument(f"{op}: attr out_shape must be set (got an empty shape)")
    for i, d in enumerate(shape):
        if d < 1:
            raise InvalidArgument(f"{op}: attr out_shape must be set explicitly, but its dim {i} is {d} (< 1)")
    slice_plan(op, int(np.prod(shape, dtype=np.int64)), num, 0, what="output")
    return shape


def check_gather_attrs(op: str, nranks: Any, rank: Any) -> None:
    """partial_allgather's required attrs: nranks >= 2 and 0 <= rank < nranks."""
    for name, v in (("nranks", nranks), ("rank", rank)):
        if v is None:
            raise InvalidArgument(f"{op}: attr {name} is required (it has no default)")
    if nranks < 2:
        raise InvalidArgument(f"{op}: attr nranks ({nranks}) must be >= 2")
    if not 0 <= rank < nranks:
        raise InvalidArgument(f"{op}: attr rank ({rank}) must be >= 0 and < nranks ({nranks})")


def gather_plan(op: str, comm, ring_id: int, numel: int, nranks: int, rank: int) -> Tuple[int, int]:
    """Check partial_allgather's attrs against ring ``ring_id``; (offset, size) of this rank's slice."""
    check_gather_attrs(op, nranks, rank)
    check_ring(op, comm, ring_id, nranks, rank)
    if numel % nranks:
        raise InvalidArgument(f"{op}: the input numel ({numel}) must be divisible by nranks ({nranks})")
    size = numel // nranks
    return size * rank, size


def checked_peer(op: str, ring_id: int, peer: int):
    """The communicator of ring ``ring_id`` (errors naming ``op``), with ``peer`` below its size."""
    comm = ring(op, ring_id)
    if peer >= comm.nranks:
        raise InvalidArgument(f"{op}: attr peer ({peer}) must be less than the {comm.nranks} ranks of "
                              f"ring_id {ring_id}")
    return comm


def named(op: str, call: Callable, *args: Any) -> Any:
    """``call(*args)``; the communicator's InvalidArgument (a bad peer, a slice of another shape or
    dtype) re-raised naming ``op``. Other errors (a failed or hung peer) pass unchanged: they carry
    which rank failed."""
    try:
        return call(*args)
    except InvalidArgument as exc:
        msg = exc.args[0] if exc.args else str(exc)
        if isinstance(msg, str) and msg.startswith(f"{op}:"):
            raise
        raise InvalidArgument(f"{op}: {msg}") from None


def send_part(comm, part, peer: int) -> None:
    """partial_send's transfer of its (host or device) slice, errors naming partial_send."""
    named("partial_send", comm.send, part, peer)


def recv_part(comm, peer: int, size: int, dtype) -> np.ndarray:
    """partial_recv's transfer: ``size`` elements of ``dtype`` from ``peer`` (host), checked."""
    return named("partial_recv", comm.recv, peer, [size], dtype)


# ---- infer_shape -----------------------------------------------------------------------------
def _send_infer(ins, attrs):
    check_p2p_attrs("partial_send", attrs.get("ring_id", 0), attrs.get("peer", 0), attrs.get("num", 1),
                    attrs.get("id", 0))
    return {}


def _recv_infer(ins, attrs):
    num = attrs.get("num", 1)
    check_p2p_attrs("partial_recv", attrs.get("ring_id", 0), attrs.get("peer", 0), num, attrs.get("id", 0))
    shape = check_out_shape("partial_recv", attrs.get("out_shape"), num)
    return {"Out": (shape, VARTYPE_TO_NAME.get(attrs.get("dtype"), None))}


def _allgather_infer(ins, attrs):
    check_gather_attrs("partial_allgather", attrs.get("nranks"), attrs.get("rank"))
    return {"Out": first(ins, "X")}


# ---- the prepare hook: the collective one, plus send/recv events of the slice ------------------
def _prepare_partial(ctx, op):
    """``collective_ops._prepare_comm`` (binding, in-place write, memory); partial_send / partial_recv
    also record a ``send`` / ``recv`` event with the bytes of the slice they moved."""
    run = _prepare_comm(ctx, op)
    kind = {"partial_send": "send", "partial_recv": "recv"}.get(op.type)
    if kind is None:
        return run
    attrs = op.all_attrs()
    name = (op.input("X") if kind == "send" else op.output("Out"))[0]
    holder = ctx.tensor(name)
    num, peer, ring_id = attrs.get("num", 1), attrs.get("peer", 0), attrs.get("ring_id", 0)
    where = {"block": ctx.block.idx, "op": ctx.block.ops.index(op), "op_type": op.type}

    def run_and_record():
        run()
        comm_context.record(kind, name, holder._array.nbytes // num, peer, ring_id,
                            trace=ctx.run_ctx.get("trace"), **where)
    return run_and_record


def _partial_op(type, inputs, outputs, attrs, infer_shape, **kw):
    return register_op(type, inputs, outputs, attrs, infer_shape=infer_shape, prepare=_prepare_partial,
                       writes_inputs=True, **kw)


# ---- the ops ------------------------------------------------------------------------------------
@_partial_op("partial_send", ["X"], [], {"ring_id": 0, "peer": 0, "num": 1, "id": 0}, _send_infer)
def partial_send(X, *, ring_id, peer, num, id):
    check_p2p_attrs("partial_send", ring_id, peer, num, id)
    x = np.ascontiguousarray(X).reshape(-1)
    off, size = slice_plan("partial_send", x.size, num, id)
    send_part(checked_peer("partial_send", ring_id, peer), x[off:off + size], peer)
    return ()


@_partial_op("partial_recv", [], ["Out"],
             {"ring_id": 0, "peer": 0, "dtype": 5, "out_shape": [], "num": 1, "id": 0}, _recv_infer)
def partial_recv(*, ring_id, peer, dtype, out_shape, num, id):
    check_p2p_attrs("partial_recv", ring_id, peer, num, id)
    shape = check_out_shape("partial_recv", out_shape, num)
    dt = to_numpy_dtype(dtype)
    out = np.zeros(shape, dt)
    off, size = slice_plan("partial_recv", out.size, num, id, what="output")
    part = recv_part(checked_peer("partial_recv", ring_id, peer), peer, size, dt)
    out.reshape(-1)[off:off + size] = part
    return out


@_partial_op("partial_allgather", ["X"], ["Out"], {"nranks": None, "rank": None, "ring_id": 0},
             _allgather_infer, inplace={"Out": "X"})
def partial_allgather(X, *, nranks, rank, ring_id):
    x = np.ascontiguousarray(X)
    comm = ring("partial_allgather", ring_id)
    off, size = gather_plan("partial_allgather", comm, ring_id, x.size, nranks, rank)
    gathered = comm.all_gather(x.reshape(-1)[off:off + size])
    return gathered.reshape(x.shape)
