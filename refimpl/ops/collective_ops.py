"""Collective ops: ordinary ops whose kernels call the current rank's communicator.

Mirrors Paddle's collective operators. A kernel looks up the communicator
for its ``ring_id`` in the rank context of the thread or process running it
(``refimpl.core.comm_context``, which ``refimpl.distributed`` fills), so the
same program runs unchanged on in-process ranks, MPI ranks or alone. Two
generations exist:

* the fluid ops ``c_allreduce_{sum,max,min,prod,avg}``, ``c_broadcast``,
  ``c_allgather``, ``c_reducescatter``, ``c_reduce_sum`` (slots ``X`` ->
  ``Out``; attrs ``ring_id``, ``use_calc_stream`` and ``root`` / ``root_id``
  / ``nranks`` / ``use_model_parallel``). Paddle 3.3.1 no longer registers
  them (its static passes emit the next kind), but its passes still look
  for them; their slots and attrs are those of the last Paddle that had them;
* the ops Paddle 3.3.1 registers: ``all_reduce`` (``reduce_type`` =
  ``ReduceOp``), ``broadcast``, ``all_gather``, ``reduce_scatter``,
  ``reduce`` (slots ``x`` -> ``out``), and ``send_v2``, ``recv_v2``,
  ``barrier``, ``c_sync_calc_stream``, ``c_sync_comm_stream``,
  ``coalesce_tensor``, with 3.3.1's slots, attrs and defaults;
* the startup ops of fleet's collective programs, ``c_gen_nccl_id``,
  ``c_comm_init`` and ``depend``, in ``collective_startup_ops`` (imported
  at the end of this module).

The kernels follow the registry convention; a shared ``prepare`` hook calls
them and adds two things a kernel cannot see: (1) when ``X`` and ``Out`` are
the same variable and its value lies in a ``coalesce_tensor`` buffer, the
result is written into that buffer, so the other variables sharing it see
it, as in Paddle; (2) ``send_v2`` / ``recv_v2`` record ``send`` / ``recv``
events (peer, var, bytes) into the executor's trace when one is active, else
into the rank's comm trace (``set_comm_trace``). Differences: there are no
streams (ops run one at a time), so the ``c_sync_*`` ops are identities;
``coalesce_tensor`` zero-fills its padding. Paddle's ``coalesce_tensor``
with ``copy_data=False`` before the backward makes the gradients views of
its buffer, which the backward ops then fill; refimpl kernels return new
arrays, so an allreduce of such a buffer first coalesces the current
values of its member variables again (``copy_data=True``, the same kernel
on every backend) and runs on that buffer: the values Paddle's aliasing
gives. Every op here is registered with
``writes_inputs=True``: a kernel may write into its input array (an
in-place collective on a fused buffer does).
"""
import numpy as np

from refimpl.core import comm_context
from refimpl.core.dtypes import VARTYPE_TO_NAME, convert_dtype, to_numpy_dtype
from refimpl.core.errors import InvalidArgument, PreconditionNotMet
from refimpl.core.reduce_op import REDUCE_NAMES, ReduceOp

from .fused_buffers import in_fused as _in_fused, register_fused as _register_fused

from .common import first, gathered_shape, same_as
from .registry import get_op_def, register_op

CPU_ALIGNMENT = 4096  # bytes; Paddle's CPU chunk alignment for coalesce_tensor (align_size = -1)


def _comm(ring_id):
    return comm_context.current().comm(ring_id)


# ---- the prepare hook shared by ops that communicate ----------------------------
def _prepare_comm(ctx, op):
    """Bind the backend's kernel to the op's variables; see the module docstring."""
    opdef = get_op_def(op.type)
    fn, attr_names, _ = opdef.kernel(ctx.backend)
    attrs = op.all_attrs()
    kw = {a: attrs[a] if a in attrs else opdef.default(a) for a in attr_names}
    x_name = (op.inputs.get(opdef.inputs[0].name) or [None])[0] if opdef.inputs else None
    out_name = (op.outputs.get(opdef.outputs[0].name) or [None])[0] if opdef.outputs else None
    src = ctx.tensor(x_name) if x_name else None
    dst = ctx.tensor(out_name) if out_name else None
    inplace = x_name is not None and x_name == out_name
    event = {"send_v2": "send", "recv_v2": "recv"}.get(op.type)
    where = {"block": ctx.block.idx, "op": ctx.block.ops.index(op), "op_type": op.type}
    peer, ring_id, mem = attrs.get("peer"), attrs.get("ring_id", 0), ctx.memory
    cat = mem.tracked(out_name) if out_name else None  # the output's memory category (memory_categories)
    recoalesce = _recoalesce(ctx, x_name) if inplace and op.type in _ALLREDUCES else None

    def run():
        if recoalesce is not None:
            recoalesce()
        if src is not None:
            x = src._array
            if x is None:
                raise PreconditionNotMet(f"{op.type}: input {x_name!r} holds no value")
            res = fn(x, **kw)
        else:
            res = fn(**kw)
        if event is not None:
            a = x if event == "send" else res
            comm_context.record(event, x_name or out_name, a.nbytes, peer, ring_id,
                           trace=ctx.run_ctx.get("trace"), **where)
        if dst is not None:
            _write(dst, res, inplace, mem, cat)
    return run


_ALLREDUCES = ("all_reduce", "c_allreduce_sum", "c_allreduce_max", "c_allreduce_min", "c_allreduce_prod",
               "c_allreduce_avg")


def _recoalesce(ctx, fused_name):
    """For the buffer of a ``coalesce_tensor(copy_data=False)`` of this block: a function coalescing the
    current values of its members into a new buffer (see the module docstring); else None."""
    maker = next((o for o in ctx.block.ops if o.type == "coalesce_tensor"
                  and o.outputs.get("FusedOutput") == [fused_name] and not o.all_attrs().get("copy_data")), None)
    if maker is None:
        return None
    opdef = get_op_def("coalesce_tensor")
    fn, attr_names, _ = opdef.kernel(ctx.backend)
    attrs = maker.all_attrs()
    kw = {a: attrs[a] if a in attrs else opdef.default(a) for a in attr_names}
    kw["copy_data"] = True
    members = [ctx.tensor(n) for n in maker.outputs.get("Output", [])]
    fused = ctx.tensor(fused_name)

    def run():
        views, buf = fn([t._array for t in members], **kw)
        for t, v in zip(members, views):
            t._array = v
        fused._array = buf
    return run


def _write(dst, res, inplace, mem, cat=None):
    old = dst._array
    if (inplace and old is not None and old is not res and old.shape == res.shape
            and old.dtype == res.dtype and isinstance(old, np.ndarray) and old.flags.writeable
            and _in_fused(old)):
        np.copyto(old, res)
        return
    dst._array = res
    mem.add(cat, res.nbytes - (old.nbytes if old is not None else 0))


def _comm_op(type, inputs, outputs, attrs, infer_shape=None):
    return register_op(type, inputs, outputs, attrs, infer_shape=infer_shape, prepare=_prepare_comm,
                       writes_inputs=True)


# ---- infer_shape -------------------------------------------------------------
def _gather_infer(in_slot, out_slot):
    def infer(ins, attrs):
        shape, dt = first(ins, in_slot)
        n = attrs.get("nranks") or 0
        if n <= 0:
            return {out_slot: (tuple(-1 for _ in shape) or (-1,), dt)}
        return {out_slot: (gathered_shape(shape, n) if shape[:1] != (-1,) else tuple(shape), dt)}
    return infer


def _scatter_infer(in_slot, out_slot):
    def infer(ins, attrs):
        shape, dt = first(ins, in_slot)
        n = attrs.get("nranks") or 1
        if shape and shape[0] > 0:
            if shape[0] % n:
                raise ValueError(f"dim[0] ({shape[0]}) is not divisible by nranks ({n})")
            shape = (shape[0] // n,) + tuple(shape[1:])
        return {out_slot: (tuple(shape), dt)}
    return infer


def _recv_infer(ins, attrs):
    shape = attrs.get("out_shape") or []
    return {"Out": (tuple(shape), VARTYPE_TO_NAME.get(attrs.get("dtype"), None))} if shape else {}


# ---- fluid collective ops (X -> Out) -------------------------------------------
_C_ALLREDUCE_ATTRS = {"ring_id": 0, "use_calc_stream": False, "use_model_parallel": False}


def _c_allreduce(op):
    def kernel(X, *, ring_id):
        return _comm(ring_id).all_reduce(X, op)
    kernel.__name__ = f"c_allreduce_{REDUCE_NAMES[op]}"
    return kernel


for _op in (ReduceOp.SUM, ReduceOp.MAX, ReduceOp.MIN, ReduceOp.PROD, ReduceOp.AVG):
    _comm_op(f"c_allreduce_{REDUCE_NAMES[_op]}", ["X"], ["Out"], _C_ALLREDUCE_ATTRS,
             infer_shape=same_as("X", "Out"))(_c_allreduce(_op))


@_comm_op("c_broadcast", ["X"], ["Out"], {"ring_id": 0, "root": 0, "use_calc_stream": False},
          infer_shape=same_as("X", "Out"))
def c_broadcast(X, *, ring_id, root):
    return _comm(ring_id).broadcast(X, root)


def _check_nranks(comm, nranks, op_type, unset):
    if nranks not in unset and nranks != comm.nranks:
        raise InvalidArgument(f"{op_type}: attr nranks={nranks} but ring {comm.ring_id} has {comm.nranks} ranks")


@_comm_op("c_allgather", ["X"], ["Out"], {"ring_id": 0, "use_calc_stream": False, "nranks": None},
          infer_shape=_gather_infer("X", "Out"))
def c_allgather(X, *, ring_id, nranks):
    comm = _comm(ring_id)
    _check_nranks(comm, nranks, "c_allgather", (None, 0))
    return comm.all_gather(X)


@_comm_op("c_reducescatter", ["X"], ["Out"], {"ring_id": 0, "nranks": 1, "use_calc_stream": False},
          infer_shape=_scatter_infer("X", "Out"))
def c_reducescatter(X, *, ring_id, nranks):
    comm = _comm(ring_id)
    _check_nranks(comm, nranks, "c_reducescatter", (None, 0, 1))
    return comm.reduce_scatter(X, ReduceOp.SUM)


@_comm_op("c_reduce_sum", ["X"], ["Out"], {"ring_id": 0, "root_id": 0, "use_calc_stream": False},
          infer_shape=same_as("X", "Out"))
def c_reduce_sum(X, *, ring_id, root_id):
    return _comm(ring_id).reduce(X, root_id, ReduceOp.SUM)


# ---- Paddle 3.3.1's collective ops (x -> out) ------------------------------------
@_comm_op("all_reduce", ["x"], ["out"], {"ring_id": 0, "reduce_type": 0}, infer_shape=same_as("x", "out"))
def all_reduce(x, *, ring_id, reduce_type):
    return _comm(ring_id).all_reduce(x, reduce_type)


@_comm_op("broadcast", ["x"], ["out"], {"ring_id": 0, "root": 0}, infer_shape=same_as("x", "out"))
def broadcast(x, *, ring_id, root):
    return _comm(ring_id).broadcast(x, root)


@_comm_op("all_gather", ["x"], ["out"], {"ring_id": 0, "nranks": 0}, infer_shape=_gather_infer("x", "out"))
def all_gather(x, *, ring_id, nranks):
    comm = _comm(ring_id)
    _check_nranks(comm, nranks, "all_gather", (None, 0))
    return comm.all_gather(x)


@_comm_op("reduce_scatter", ["x"], ["out"], {"ring_id": 0, "nranks": 1}, infer_shape=_scatter_infer("x", "out"))
def reduce_scatter(x, *, ring_id, nranks):
    comm = _comm(ring_id)
    _check_nranks(comm, nranks, "reduce_scatter", (None, 0, 1))
    return comm.reduce_scatter(x, ReduceOp.SUM)


@_comm_op("reduce", ["x"], ["out"], {"ring_id": 0, "root_id": 0, "reduce_type": 0}, infer_shape=same_as("x", "out"))
def reduce(x, *, ring_id, root_id, reduce_type):
    return _comm(ring_id).reduce(x, root_id, reduce_type)


# ---- point to point, barrier, stream syncs ----------------------------------------
_P2P_ATTRS = {"ring_id": 0, "peer": 0, "use_calc_stream": False, "dynamic_shape": False}


@_comm_op("send_v2", ["X"], [], _P2P_ATTRS)
def send_v2(X, *, ring_id, peer):
    _comm(ring_id).send(X, peer)
    return ()


@_comm_op("recv_v2", [], ["Out"], dict(_P2P_ATTRS, dtype=5, out_shape=[]), infer_shape=_recv_infer)
def recv_v2(*, ring_id, peer, dtype, out_shape, dynamic_shape):
    shape = None if dynamic_shape else list(out_shape)
    return _comm(ring_id).recv(peer, shape, to_numpy_dtype(dtype))


@_comm_op("barrier", ["X"], ["Out"], {"ring_id": 0}, infer_shape=same_as("X", "Out"))
def barrier(X, *, ring_id):
    _comm(ring_id).barrier()
    return X


@register_op("c_sync_calc_stream", ["X"], ["Out"], {}, infer_shape=same_as("X", "Out"), writes_inputs=True)
def c_sync_calc_stream(X):
    return X


def _sync_comm_infer(ins, attrs):
    return {"Out": list(ins.get("X") or [])}


@register_op("c_sync_comm_stream", ["X*"], ["Out*"], {"ring_id": 0}, infer_shape=_sync_comm_infer,
             writes_inputs=True)
def c_sync_comm_stream(X, *, ring_id):
    return list(X)


# ---- coalesce_tensor ----------------------------------------------------------------
_COALESCE_ATTRS = {"dtype": None, "copy_data": False, "set_constant": False, "persist_output": False,
                   "constant": 0.0, "use_align": True, "align_size": -1, "user_defined_size_of_dtype": -1,
                   "concated_shapes": [], "concated_ranks": []}


def _padded(numel, size_of_dtype, use_align, align_size):
    """Elements a chunk of ``numel`` takes in the fused buffer (Paddle's ``Alignment``)."""
    if not use_align:
        return numel
    align = align_size if align_size > 0 else CPU_ALIGNMENT
    nbytes = numel * size_of_dtype
    nbytes += -nbytes % align
    return nbytes // size_of_dtype


def _split_shapes(shapes, ranks):
    out, pos = [], 0
    for r in ranks:
        out.append(tuple(shapes[pos:pos + r]))
        pos += r
    return out


def _coalesce_layout(shapes, attrs):
    size = attrs["user_defined_size_of_dtype"]
    if size is None or size <= 0:
        size = to_numpy_dtype(attrs["dtype"]).itemsize
    offsets, pos = [], 0
    for s in shapes:
        offsets.append(pos)
        pos += _padded(int(np.prod(s, dtype=np.int64)), size, attrs["use_align"], attrs["align_size"])
    return offsets, pos


def _coalesce_infer(ins, attrs):
    pairs = ins.get("Input") or []
    dt = convert_dtype(attrs["dtype"]) if attrs.get("dtype") is not None else None
    outs = {"Output": [(s, dt or d) for s, d in pairs]}
    if dt is not None and pairs and all(d >= 0 for s, _ in pairs for d in s):
        outs["FusedOutput"] = ((_coalesce_layout([s for s, _ in pairs], attrs)[1],), dt)
    return outs


def coalesce_plan(Input, dtype, use_align, align_size, user_defined_size_of_dtype, concated_shapes,
                  concated_ranks):
    """Check ``coalesce_tensor``'s inputs and lay them out: (numpy dtype, shapes, offsets, total size).

    Shared by every backend's kernel, so the fused layout is the same everywhere.
    """
    if dtype is None:
        raise InvalidArgument("coalesce_tensor: attr dtype is required")
    np_dtype = to_numpy_dtype(dtype)
    if concated_shapes and concated_ranks:
        shapes = _split_shapes(list(concated_shapes), list(concated_ranks))
    else:
        missing = [i for i, a in enumerate(Input) if a is None]
        if missing:
            raise PreconditionNotMet(f"coalesce_tensor: Input[{missing[0]}] holds no value and no "
                                     f"concated_shapes are given")
        shapes = [tuple(a.shape) for a in Input]
    for i, a in enumerate(Input):
        if a is not None and a.dtype != np_dtype:
            raise InvalidArgument(f"coalesce_tensor: Input[{i}] has dtype {a.dtype} but attr dtype is {np_dtype}")
    attrs = {"dtype": dtype, "user_defined_size_of_dtype": user_defined_size_of_dtype,
             "use_align": use_align, "align_size": align_size}
    offsets, total = _coalesce_layout(shapes, attrs)
    return np_dtype, shapes, offsets, total


@register_op("coalesce_tensor", ["Input*"], ["Output*", "FusedOutput"], _COALESCE_ATTRS,
             infer_shape=_coalesce_infer, writes_inputs=True)
def coalesce_tensor(Input, *, dtype, copy_data, set_constant, constant, use_align, align_size,
                    user_defined_size_of_dtype, concated_shapes, concated_ranks):
    """One contiguous buffer for ``Input``; ``Output[i]`` are views into it."""
    np_dtype, shapes, offsets, total = coalesce_plan(Input, dtype, use_align, align_size,
                                                     user_defined_size_of_dtype, concated_shapes, concated_ranks)
    fused = np.zeros(total, np_dtype)
    _register_fused(fused)
    if set_constant:
        fused.fill(constant)
    outs = [fused[o:o + int(np.prod(s, dtype=np.int64))].reshape(s) for o, s in zip(offsets, shapes)]
    if copy_data:
        for i, (dst, a) in enumerate(zip(outs, Input)):
            if a is None:
                raise PreconditionNotMet(f"coalesce_tensor: copy_data is set but Input[{i}] holds no value")
            np.copyto(dst, a)
    return outs, fused


from . import collective_startup_ops  # noqa: E402,F401  (c_gen_nccl_id, c_comm_init, depend)
