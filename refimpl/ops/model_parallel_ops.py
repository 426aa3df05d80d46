"""Tensor-parallel ops: c_identity, c_concat, c_split, mp_allreduce_sum, c_embedding,
c_softmax_with_cross_entropy, and their grads.

Mirrors Paddle 3.3.1's operators in ``paddle/fluid/operators/collective/`` (``c_identity_op.cc``,
``c_concat_op.cc``, ``c_split_op.cc``, ``mp_allreduce_sum_op.cc``, ``c_embedding_op.cc``,
``c_softmax_with_cross_entropy_op.cc``) and their phi kernels (``c_embedding_kernel.cu``,
``c_softmax_with_cross_entropy_kernel.cu`` and the ``_grad`` ones): slots, attrs and defaults as
Paddle 3.3.1's op protos, grad ops as its grad makers write them (read from
``core.get_grad_op_desc`` of 3.3.1):

* ``c_identity``: Out = X; grad ``all_reduce`` (x -> out, ``reduce_type`` 0 = sum, the forward's
  attrs copied), the allreduce-sum of the activation's gradient over the ring;
* ``c_concat``: the ranks' X gathered over the ring and laid side by side along the last axis;
  grad ``c_split`` (same attrs);
* ``c_split``: this rank's (attr ``rank``) slice of the last axis, no communication;
* ``mp_allreduce_sum``: Out = sum over the ring of X; grad ``c_identity`` (attr ring_id);
* ``c_embedding``: rows of this rank's vocabulary shard W = rows [start_index, start_index +
  len(W)) of the whole table; an id outside the shard gives a zero row, an id outside [0,
  vocab_size) (when vocab_size >= 0) is an error (Paddle's GPU check). ``c_embedding_grad``
  (W, Ids, Out@GRAD -> W@GRAD, W a no-need-buffer slot) adds Out@GRAD rows into the shard rows
  of their ids, in the ids' order; other ids add nothing;
* ``c_softmax_with_cross_entropy``: softmax + hard-label cross-entropy over a class axis (the
  last) split across the ring, rank r holding classes [r D, (r + 1) D). The row max is
  allreduced (max), then the label's shifted logit (from the rank owning it) and the row sum of
  ``exp`` (sums), Paddle's order; Loss = log(sum) - logit (Paddle's "tolerable value" clamp of
  +-inf to +-1e20), 0 where Label == ignore_index; Softmax = exp / sum, this rank's columns.
  Its grad (Softmax, Label, Loss@GRAD -> Logits@GRAD) is ``(Softmax - onehot) * Loss@GRAD``,
  0 on ignored rows, without communication. In-place pairs as Paddle's (Softmax may reuse Logits,
  Logits@GRAD may reuse Softmax); W is a no-need-buffer slot of ``c_embedding_grad``, as in Paddle.

Differences from Paddle. Paddle 3.3.1's ``c_split`` grad maker writes an ``all_gather`` op with
slots X/Out, which that op does not have (its slots are x/out), so Paddle's own append_backward
fails there (infer-shape of ``all_gather``); and an allgather along dim 0 would not undo a split
of the last axis anyway. refimpl writes ``c_concat`` (same attrs), the op that gives the
gradient. The kernels check what Paddle leaves to chance: attrs ``nranks`` / ``rank`` of
``c_concat`` and ``c_softmax_with_cross_entropy`` against the ring's communicator, and a
``c_embedding`` shard lying outside [0, vocab_size); and inputs whose shapes differ across the
ring's ranks are an ``InvalidArgument`` naming the op (``c_concat``, ``mp_allreduce_sum``, ...),
not the ``all_gather`` / ``all_reduce`` it runs. The soft-label (label last dim > 1) form of
``c_softmax_with_cross_entropy`` is not implemented (Unimplemented). Paddle has no CPU kernel
for ``c_softmax_with_cross_entropy``; refimpl has one on every backend.
"""
from typing import Sequence, Tuple

import numpy as np

from refimpl.core.errors import InvalidArgument, NotFound, Unimplemented
from refimpl.core.reduce_op import ReduceOp

from .collective_ops import _comm, _prepare_comm
from .common import first, grads_like, same_as
from .grad_maker import simple_grad
from .registry import register_op

#: the tensor-parallel ops that communicate over their model-parallel ring (``ring_id``), and all of them
RING_OPS = ("c_identity", "c_concat", "c_split", "mp_allreduce_sum", "c_softmax_with_cross_entropy")
TENSOR_PARALLEL_OPS = RING_OPS + ("c_embedding",)

__all__ = ["RING_OPS", "TENSOR_PARALLEL_OPS", "ring", "check_ring", "check_ring_id", "check_not_scalar", "check_split_attrs", "split_width",
           "embedding_plan", "check_out_grad_shape", "ce_plan", "check_labels", "tolerable", "TOLERABLE"]

TOLERABLE = 1e20  # Paddle's kApproInf (phi::funcs::TolerableValue)


# ---- shared checks (every backend's kernels use these) ----------------------------------------
class _OpRing:
    """A ring's communicator whose collectives name the tensor-parallel op in their errors: a shape
    mismatch across ranks in ``c_concat`` is reported as ``c_concat``'s, not as the ``all_gather``
    it runs. Everything else is the communicator's own."""

    def __init__(self, op: str, comm) -> None:
        self._op, self._comm = op, comm

    def __getattr__(self, name: str):
        return getattr(self._comm, name)

    def _named(self, call, *args, **kwargs):
        try:
            return call(*args, **kwargs)
        except InvalidArgument as exc:
            raise InvalidArgument(f"{self._op}: {exc.args[0] if exc.args else exc}") from None

    def all_gather(self, x, **kwargs):
        return self._named(self._comm.all_gather, x, **kwargs)

    def all_reduce(self, x, op=ReduceOp.SUM, **kwargs):
        return self._named(self._comm.all_reduce, x, op, **kwargs)


def ring(op: str, ring_id: int):
    """This rank's communicator for ``ring_id``, its errors naming ``op``; NotFound naming ``op`` when
    there is none."""
    try:
        return _OpRing(op, _comm(ring_id))
    except NotFound as exc:
        raise NotFound(f"{op}: {exc}") from None


def check_ring(op: str, comm, ring_id: int, nranks: int, rank: int) -> None:
    """The op's ``nranks`` / ``rank`` attrs must be those of ring ``ring_id`` (``comm``) it runs on."""
    if nranks != comm.nranks:
        raise InvalidArgument(f"{op}: attr nranks={nranks} but ring_id {ring_id} has {comm.nranks} ranks")
    if rank != comm.rank:
        raise InvalidArgument(f"{op}: attr rank={rank} but this is rank {comm.rank} of ring_id {ring_id}")


def check_split_attrs(op: str, nranks: int, rank: int) -> None:
    if nranks < 2:
        raise InvalidArgument(f"{op}: attr nranks must be at least 2, got {nranks}")
    if not 0 <= rank < nranks:
        raise InvalidArgument(f"{op}: attr rank={rank} is not in [0, nranks={nranks})")


def split_width(op: str, shape: Sequence[int], nranks: int, rank: int) -> int:
    """The width of one rank's slice of the last axis of ``shape`` (-1 when unknown), checked."""
    check_split_attrs(op, nranks, rank)
    if len(shape) == 0:
        raise InvalidArgument(f"{op}: input X must have at least one dim, got a 0-d tensor")
    d = shape[-1]
    if d >= 0 and d % nranks:
        raise InvalidArgument(f"{op}: the last dim ({d}) of X is not divisible by nranks ({nranks})")
    return d // nranks if d >= 0 else -1


def _check_index_dtype(op: str, slot: str, a) -> None:
    if np.dtype(a.dtype) not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise InvalidArgument(f"{op}: {slot} must be int32 or int64, got {np.dtype(a.dtype)}")


def embedding_plan(op: str, w_shape: Sequence[int], ids: np.ndarray, start_index: int,
                   vocab_size: int) -> Tuple[int, int]:
    """Check a c_embedding call; return (rows, width) of the shard W."""
    if len(w_shape) != 2:
        raise InvalidArgument(f"{op}: W must be 2-D (the shard's rows x width), got shape {list(w_shape)}")
    _check_index_dtype(op, "Ids", ids)
    rows = int(w_shape[0])
    if start_index < 0 or (vocab_size >= 0 and start_index + rows > vocab_size):
        raise InvalidArgument(f"{op}: the shard rows [{start_index}, {start_index + rows}) (start_index "
                              f"{start_index}, W has {rows} rows) are not inside the vocabulary [0, {vocab_size})")
    if ids.size:
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or (vocab_size >= 0 and hi >= vocab_size):
            bad = lo if lo < 0 else hi
            raise InvalidArgument(f"{op}: id {bad} is out of the vocabulary [0, {vocab_size})")
    return rows, int(w_shape[1])


def check_out_grad_shape(d_shape: Sequence[int], ids_shape: Sequence[int], width: int) -> None:
    if tuple(d_shape) != tuple(ids_shape) + (width,):
        raise InvalidArgument(f"c_embedding_grad: Out@GRAD shape {list(d_shape)} is not Ids' "
                              f"{list(ids_shape)} + [{width}]")


def check_ring_id(op: str, ring_id: int) -> None:
    if ring_id < 0:
        raise InvalidArgument(f"{op}: attr ring_id must be >= 0, got {ring_id}")


def check_not_scalar(op: str, ndim: int) -> None:
    if ndim == 0:
        raise InvalidArgument(f"{op}: input X must have at least one dim, got a 0-d tensor")


def ce_plan(op: str, logits_shape: Sequence[int], label: np.ndarray) -> Tuple[int, int]:
    """Check logits / label shapes of c_softmax_with_cross_entropy(_grad); return (rows N, classes D here)."""
    shape = tuple(logits_shape)
    if len(shape) < 1 or shape[-1] == 0:
        raise InvalidArgument(f"{op}: Logits must have a non-empty last (class) dim, got shape {list(shape)}")
    _check_index_dtype(op, "Label", label)
    lshape = tuple(label.shape)
    if len(lshape) == len(shape) and lshape[:-1] == shape[:-1] and lshape[-1] > 1:
        raise Unimplemented(f"{op}: soft labels (Label last dim {lshape[-1]} > 1) are not supported")
    if len(lshape) != len(shape) or lshape[:-1] != shape[:-1] or lshape[-1] != 1:
        raise InvalidArgument(f"{op}: Label shape {list(lshape)} must be Logits' {list(shape)} with the last dim 1")
    d = shape[-1]
    return int(np.prod(shape[:-1], dtype=np.int64)), d


def check_labels(op: str, lab: np.ndarray, classes: int, ignore_index: int) -> None:
    bad = ~(((lab >= 0) & (lab < classes)) | (lab == ignore_index))
    if bad.any():
        raise InvalidArgument(f"{op}: label {int(lab[bad][0])} is out of the classes [0, {classes}) and is not "
                              f"ignore_index {ignore_index}")


def tolerable(v: np.ndarray) -> np.ndarray:
    """Paddle's TolerableValue: +-inf (and NaN, as -inf) to +-1e20."""
    ok = np.isfinite(v)
    if ok.all():
        return v
    return np.where(ok, v, np.where(v > 0, TOLERABLE, -TOLERABLE)).astype(v.dtype)


# ---- infer_shape -----------------------------------------------------------------------------
def _concat_infer(ins, attrs):
    shape, dt = first(ins, "X")
    nranks = attrs.get("nranks", 1)
    check_split_attrs("c_concat", nranks, attrs.get("rank", 0))
    check_not_scalar("c_concat", len(shape))
    return {"Out": (tuple(shape[:-1]) + (shape[-1] * nranks if shape[-1] >= 0 else -1,), dt)}


def _split_infer(ins, attrs):
    shape, dt = first(ins, "X")
    return {"Out": (tuple(shape[:-1]) + (split_width("c_split", shape, attrs.get("nranks", 1),
                                                      attrs.get("rank", 0)),), dt)}


def _embedding_infer(ins, attrs):
    w_shape, dt = first(ins, "W")
    ids_shape, _ = first(ins, "Ids")
    if len(w_shape) != 2:
        raise InvalidArgument(f"c_embedding: W must be 2-D, got shape {list(w_shape)}")
    return {"Out": (tuple(ids_shape) + (w_shape[1],), dt)}


def _ce_infer(ins, attrs):
    shape, dt = first(ins, "Logits")
    if not shape:
        raise InvalidArgument("c_softmax_with_cross_entropy: Logits must have at least one dim")
    return {"Softmax": (tuple(shape), dt), "Loss": (tuple(shape[:-1]) + (1,), dt)}


# ---- grad makers (Paddle 3.3.1's, see the module docstring) ------------------------------------
def _identity_grad(g):
    return [g.op("all_reduce", {"x": g.output_grad("Out")}, {"out": g.input_grad("X")},
                 g.attrs(reduce_type=int(ReduceOp.SUM)))]


def _same_attrs_grad(grad_type):
    def maker(g):
        return [g.op(grad_type, {"X": g.output_grad("Out")}, {"Out": g.input_grad("X")})]
    return maker


# ---- c_identity, c_concat, c_split, mp_allreduce_sum -------------------------------------------
@register_op("c_identity", ["X"], ["Out"], {"ring_id": 0, "use_calc_stream": True, "use_model_parallel": True},
             infer_shape=same_as("X", "Out"), grad=_identity_grad)
def c_identity(X, *, ring_id):
    check_ring_id("c_identity", ring_id)
    return np.array(X, copy=True)


_SPLIT_ATTRS = {"rank": 0, "nranks": 1, "ring_id": 0, "use_model_parallel": True}


@register_op("c_concat", ["X"], ["Out"], dict(_SPLIT_ATTRS, use_calc_stream=True),
             infer_shape=_concat_infer, grad=_same_attrs_grad("c_split"),
             prepare=_prepare_comm, writes_inputs=True)
def c_concat(X, *, rank, nranks, ring_id):
    check_not_scalar("c_concat", np.ndim(X))
    check_split_attrs("c_concat", nranks, rank)
    comm = ring("c_concat", ring_id)
    check_ring("c_concat", comm, ring_id, nranks, rank)
    gathered = comm.all_gather(np.ascontiguousarray(X))
    return np.concatenate(np.split(gathered, nranks, axis=0), axis=-1)


@register_op("c_split", ["X"], ["Out"], _SPLIT_ATTRS, infer_shape=_split_infer,
             grad=_same_attrs_grad("c_concat"))
def c_split(X, *, rank, nranks):
    w = split_width("c_split", np.shape(X), nranks, rank)
    return np.ascontiguousarray(X[..., rank * w:(rank + 1) * w])


@register_op("mp_allreduce_sum", ["X"], ["Out"], {"ring_id": 0}, infer_shape=same_as("X", "Out"),
             grad=_same_attrs_grad("c_identity"), prepare=_prepare_comm, writes_inputs=True)
def mp_allreduce_sum(X, *, ring_id):
    return ring("mp_allreduce_sum", ring_id).all_reduce(X, ReduceOp.SUM)


# ---- c_embedding ------------------------------------------------------------------------------
_EMB_ATTRS = {"start_index": 0, "vocab_size": -1}


@register_op("c_embedding", ["W", "Ids"], ["Out"], _EMB_ATTRS, infer_shape=_embedding_infer,
             grad=simple_grad("c_embedding_grad", ["W", "Ids", "Out@GRAD"], ["W@GRAD"]))
def c_embedding(W, Ids, *, start_index, vocab_size):
    rows, width = embedding_plan("c_embedding", W.shape, Ids, start_index, vocab_size)
    local = Ids.astype(np.int64).reshape(-1) - start_index
    own = (local >= 0) & (local < rows)
    out = np.zeros((local.size, width), W.dtype)
    out[own] = W[local[own]]
    return out.reshape(tuple(Ids.shape) + (width,))


@register_op("c_embedding_grad", ["W", "Ids", "Out@GRAD"], ["W@GRAD"], _EMB_ATTRS,
             infer_shape=grads_like(**{"W@GRAD": "W"}), no_need_buffer=("W",))
def c_embedding_grad(W, Ids, dOut, *, start_index, vocab_size):
    rows, width = embedding_plan("c_embedding_grad", W.shape, Ids, start_index, vocab_size)
    check_out_grad_shape(dOut.shape, Ids.shape, width)
    local = Ids.astype(np.int64).reshape(-1) - start_index
    own = (local >= 0) & (local < rows)
    grad = np.zeros((rows, width), dOut.dtype)
    np.add.at(grad, local[own], dOut.reshape(-1, width)[own])  # in the ids' order, as one thread per row
    return grad


# ---- c_softmax_with_cross_entropy ---------------------------------------------------------------
_CE_ATTRS = {"ignore_index": -100, "ring_id": 0, "rank": 0, "nranks": 0}


@register_op("c_softmax_with_cross_entropy", ["Logits", "Label"], ["Softmax", "Loss"], _CE_ATTRS,
             infer_shape=_ce_infer, inplace={"Softmax": "Logits"},
             grad=simple_grad("c_softmax_with_cross_entropy_grad", ["Softmax", "Label", "Loss@GRAD"],
                              ["Logits@GRAD"]))
def c_softmax_with_cross_entropy(Logits, Label, *, ignore_index, ring_id, rank, nranks):
    op = "c_softmax_with_cross_entropy"
    n, d = ce_plan(op, Logits.shape, Label)
    comm = ring(op, ring_id)
    check_ring(op, comm, ring_id, nranks, rank)
    lab = Label.astype(np.int64).reshape(-1)
    check_labels(op, lab, d * nranks, ignore_index)
    x = Logits.reshape(n, d)
    row_max = comm.all_reduce(x.max(axis=1), ReduceOp.MAX)
    shifted = x - row_max[:, None]
    local = lab - rank * d
    own = (local >= 0) & (local < d)
    picked = np.zeros(n, x.dtype)
    picked[own] = shifted[np.flatnonzero(own), local[own]]
    picked = comm.all_reduce(picked, ReduceOp.SUM)
    e = np.exp(shifted)
    total = comm.all_reduce(e.sum(axis=1), ReduceOp.SUM)
    loss = tolerable(tolerable(np.log(total)) - picked)
    loss[lab == ignore_index] = 0
    softmax = e / total[:, None]
    return softmax.reshape(Logits.shape), loss.reshape(tuple(Logits.shape[:-1]) + (1,))


@register_op("c_softmax_with_cross_entropy_grad", ["Softmax", "Label", "Loss@GRAD"], ["Logits@GRAD"], _CE_ATTRS,
             infer_shape=grads_like(**{"Logits@GRAD": "Softmax"}), inplace={"Logits@GRAD": "Softmax"})
def c_softmax_with_cross_entropy_grad(Softmax, Label, dLoss, *, ignore_index, rank):
    n, d = ce_plan("c_softmax_with_cross_entropy_grad", Softmax.shape, Label)
    lab = Label.astype(np.int64).reshape(-1)
    grad = Softmax.reshape(n, d).copy()
    local = lab - rank * d
    own = (local >= 0) & (local < d)
    rows = np.flatnonzero(own)
    grad[rows, local[own]] -= Softmax.dtype.type(1)
    grad *= dLoss.reshape(n, 1)
    grad[lab == ignore_index] = 0
    return grad.reshape(Softmax.shape)
