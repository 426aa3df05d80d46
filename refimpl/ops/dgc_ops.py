"""Deep Gradient Compression ops: dgc, dgc_momentum, dgc_clip_by_norm.

Mirrors Paddle 3.3.1's GPU-only kernels (``paddle/phi/kernels/gpu/dgc_kernel.cu``,
``impl/dgc_momentum_kernel_impl.h``, ``impl/dgc_clip_by_norm_kernel_impl.h``;
slots and attrs as their op protos); refimpl runs them on the CPU backend too.
``current_step`` and ``nranks`` are float32 [1] tensors (``__g_dgc_counter__``,
``__g_nranks__``); a step counts as "before the ramp-up" while
``int(current_step) < int(rampup_begin_step)``.

* dgc: ``Grad_out = nranks * Grad`` (+ ``regular_coeff * sign(Param)`` for
  regular_type 1, + ``regular_coeff * Param`` for 2). Before the ramp-up that is
  all (U, V, k, EncodeGrad, GatherBuff are not written). From then on, with
  ``ratio = 1 - sparsity[min(int((step - begin) * len(sparsity) / rampup_step),
  len - 1)]`` and ``k = int(float32(numel) * ratio)``: momentum correction
  ``U = m U + g`` (Nesterov: ``U = m (U + g)``), ``V = U + V`` (Nesterov: ``+ g``
  too), then the top-k of ``|V|`` is sent and masked (U and V zeroed there) and
  ``Grad_out`` is zeroed: what is left of the gradient travels in EncodeGrad.
* dgc_momentum: ``Grad_out = float32(1 / nranks) * Grad`` (undoing dgc's
  scaling), then the ``momentum`` update before the ramp-up and the ``sgd``
  update after it (DGC has applied the momentum already).
* dgc_clip_by_norm: ``clip_by_norm`` from the ramp-up on, the input unchanged before.
* dgc_sparse_reduce (refimpl's, no Paddle op): ``Grad_out = Grad`` plus every
  rank's encoded top-k (``GatherBuff``, the ``c_allgather`` of the ranks'
  EncodeGrads, ``k`` entries each) added at its indices, rank after rank;
  with ``k`` 0 (before the ramp-up) Grad unchanged. Paddle 2.x did this in its
  ParallelExecutor's ``SparseAllReduceOpHandle`` (``sparseReduce``), outside
  the program; Paddle 3.3.1's static path has nothing in its place.

Differences from Paddle. The top-k is exact and deterministic, where Paddle's
``k_select`` (the external ``dgc`` library) estimates a threshold by sampling:
the k entries of largest ``|V|``, ties going to the lower flat index, encoded
in ascending index order as ``EncodeGrad`` = 2k float32 values, the k indices
as int32 bit patterns (``.view(int32)`` reads them back) followed by the k
values of V. ``GatherBuff`` (2k * nranks) is returned zeroed: it is the
receive buffer of the ``c_allgather`` that DGCMomentumOptimizer puts before
``dgc_sparse_reduce``. In Paddle the kernels read Grad after writing Grad_out
into the same var; here they use the scaled gradient directly, which is the
same thing for the programs DGCMomentumOptimizer builds (Grad is Grad_out).
"""
from typing import Optional, Sequence, Tuple

import numpy as np

from refimpl.core.errors import InvalidArgument, PreconditionNotMet

from .common import f32, first, same_as
from .optimizer_ops import momentum, sgd
from .reduce_ops import clip_by_norm
from .registry import register_op

__all__ = ["dgc_nranks", "dgc_step", "dgc_k", "dgc_top_k", "encode_top_k", "decode_gathered", "sparse_parts"]


def _one(op: str, slot: str, t) -> float:
    a = np.asarray(t)
    if a.size != 1:
        raise InvalidArgument(f"{op}: {slot} must hold one value, got shape {list(a.shape)}")
    return float(a.reshape(-1)[0])


def dgc_nranks(op: str, nranks) -> int:
    n = int(np.float32(_one(op, "nranks", nranks)))
    if n <= 1:
        raise PreconditionNotMet(f"{op}: DGC needs more than one trainer, got nranks={n}")
    return n


def dgc_step(op: str, current_step) -> int:
    """The step as the kernels compare it (Paddle's ``static_cast<int>`` of the float counter)."""
    return int(np.float32(_one(op, "current_step", current_step)))


def dgc_k(numel: int, step: float, sparsity: Sequence[float], rampup_begin_step: float, rampup_step: float) -> int:
    """How many entries are sent at ``step`` (>= the ramp-up): Paddle's float32 arithmetic."""
    if not sparsity:
        raise InvalidArgument("dgc: attr sparsity is empty; it needs at least one value")
    since = np.float32(step) - np.float32(rampup_begin_step)
    if since < 0:
        raise InvalidArgument(f"dgc: current step {step} is before rampup_begin_step {rampup_begin_step}")
    idx = min(int(since * np.float32(len(sparsity)) / np.float32(rampup_step)), len(sparsity) - 1)
    ratio = np.float32(1) - np.float32(sparsity[idx])
    if not 0 <= ratio < 1:
        raise InvalidArgument(f"dgc: sparsity {sparsity[idx]} gives the ratio {ratio}, which must be in [0, 1)")
    return int(np.float32(numel) * ratio)


def dgc_top_k(v: np.ndarray, k: int) -> np.ndarray:
    """Flat indices of the k largest ``|v|``, ties to the lower index, in ascending order."""
    order = np.argsort(-np.abs(v.reshape(-1)), kind="stable")[:k]
    return np.sort(order)


def encode_top_k(idx: np.ndarray, values: np.ndarray) -> np.ndarray:
    """EncodeGrad: the indices as int32 bit patterns, then the values (float32)."""
    out = np.empty(2 * idx.size, np.float32)
    out[:idx.size] = idx.astype(np.int32).view(np.float32)
    out[idx.size:] = values.astype(np.float32)
    return out


def sparse_parts(op: str, gathered_size: int, k_value, numel: int) -> Tuple[int, int]:
    """(k, number of ranks' parts) of a gathered buffer, checked."""
    k = int(np.float32(_one(op, "k", k_value)))
    if k == 0:
        return 0, 0
    if k < 0 or k > numel or gathered_size % (2 * k):
        raise InvalidArgument(f"{op}: GatherBuff of {gathered_size} values does not hold parts of 2 * k = {2 * k} "
                              f"(k must be in [0, {numel}])")
    return k, gathered_size // (2 * k)


def decode_gathered(out: np.ndarray, gathered: np.ndarray, k: int, parts: int) -> np.ndarray:
    """Add ``parts`` EncodeGrads laid end to end into flat ``out`` (in place), rank after rank."""
    for r in range(parts):
        part = gathered[2 * k * r:2 * k * (r + 1)]
        idx = part[:k].view(np.int32)
        if idx.size and (idx.min() < 0 or idx.max() >= out.size):
            raise InvalidArgument(f"dgc_sparse_reduce: rank {r}'s indices leave [0, {out.size})")
        np.add.at(out, idx, part[k:].astype(out.dtype))
    return out


def _regularized(op: str, g: np.ndarray, p: Optional[np.ndarray], nranks: int, regular_type: int,
                 regular_coeff: float) -> np.ndarray:
    dt = g.dtype.type
    out = g * dt(nranks)
    if regular_type not in (0, 1, 2):
        raise InvalidArgument(f"{op}: regular_type must be 0 (none), 1 (L1Decay) or 2 (L2Decay), got {regular_type}")
    if regular_type:
        if p is None:
            raise InvalidArgument(f"{op}: regular_type {regular_type} needs the Param input")
        out += dt(np.float32(regular_coeff)) * (np.sign(p) if regular_type == 1 else p)
    return out


def _dgc_infer(ins, attrs):
    shape, dt = first(ins, "Grad")
    return {"U_out": first(ins, "U"), "V_out": first(ins, "V"), "Grad_out": (shape, dt), "EncodeGrad": ((-1,), dt),
            "k": ((1,), dt), "GatherBuff": ((-1,), dt)}


@register_op("dgc", ["U", "V", "Grad", "Param?", "current_step", "nranks"],
             ["U_out", "V_out", "EncodeGrad", "Grad_out", "k", "GatherBuff"],
             {"m": f32(0.9), "use_nesterov": True, "sparsity": [], "rampup_begin_step": f32(0.0),
              "rampup_step": f32(0.0), "regular_coeff": f32(0.0), "regular_type": 0},
             infer_shape=_dgc_infer, writes_inputs=True)
def dgc(U, V, Grad, Param, current_step, nranks, *, m, use_nesterov, sparsity, rampup_begin_step, rampup_step,
        regular_coeff, regular_type):
    n = dgc_nranks("dgc", nranks)
    g = _regularized("dgc", Grad, Param, n, regular_type, regular_coeff)
    step = dgc_step("dgc", current_step)
    if step < int(np.float32(rampup_begin_step)):
        return U, V, None, g, None, None
    if U.shape != Grad.shape or V.shape != Grad.shape:
        raise InvalidArgument(f"dgc: U {list(U.shape)} and V {list(V.shape)} must be shaped like Grad "
                              f"{list(Grad.shape)}")
    k = dgc_k(Grad.size, float(np.float32(_one("dgc", "current_step", current_step))), sparsity,
              rampup_begin_step, rampup_step)
    dt = U.dtype.type
    if use_nesterov:
        U += g
        U *= dt(np.float32(m))
        V += U
        V += g
    else:
        U *= dt(np.float32(m))
        U += g
        V += U
    idx = dgc_top_k(V, k)
    encoded = encode_top_k(idx, V.reshape(-1)[idx])
    U.reshape(-1)[idx] = 0
    V.reshape(-1)[idx] = 0
    g[...] = 0
    return U, V, encoded, g, np.array([k], Grad.dtype), np.zeros(2 * k * n, Grad.dtype)


@register_op("dgc_momentum", ["Param", "Grad", "Velocity", "LearningRate", "MasterParam?", "current_step", "nranks"],
             ["ParamOut", "VelocityOut", "MasterParamOut?", "Grad_out"],
             {"mu": f32(0.9), "use_nesterov": False, "regularization_method": "", "regularization_coeff": 0.0,
              "multi_precision": False, "rescale_grad": 1.0, "rampup_begin_step": -1.0},
             infer_shape=lambda ins, attrs: {"ParamOut": first(ins, "Param"), "VelocityOut": first(ins, "Velocity"),
                                             "Grad_out": first(ins, "Grad")},
             writes_inputs=True)
def dgc_momentum(Param, Grad, Velocity, LearningRate, MasterParam, current_step, nranks, *, mu, use_nesterov,
                 regularization_method, regularization_coeff, multi_precision, rescale_grad,
                 rampup_begin_step) -> Tuple:
    if int(np.float32(rampup_begin_step)) < 0:  # Paddle: nothing at all
        return Param, Velocity, MasterParam, Grad
    n = dgc_nranks("dgc_momentum", nranks)
    g = Grad * Grad.dtype.type(np.float32(1.0 / n))
    if dgc_step("dgc_momentum", current_step) < int(np.float32(rampup_begin_step)):
        p, v, master = momentum(Param, g, Velocity, LearningRate, None, mu=mu, use_nesterov=use_nesterov,
                                regularization_method=regularization_method,
                                regularization_coeff=regularization_coeff, multi_precision=False,
                                rescale_grad=rescale_grad)
        return p, v, master, g
    p, master = sgd(Param, LearningRate, g, MasterParam if multi_precision else None, multi_precision=multi_precision)
    return p, Velocity, master, g


@register_op("dgc_clip_by_norm", ["X", "current_step"], ["Out"], {"max_norm": f32(1.0), "rampup_begin_step": -1.0},
             infer_shape=same_as("X", "Out"))
def dgc_clip_by_norm(X, current_step, *, max_norm, rampup_begin_step):
    begin = int(np.float32(rampup_begin_step))
    if begin < 0 or dgc_step("dgc_clip_by_norm", current_step) < begin:
        return X
    return clip_by_norm(X, max_norm=max_norm)


@register_op("dgc_sparse_reduce", ["GatherBuff", "k", "Grad"], ["Grad_out"], {},
             infer_shape=same_as("Grad", "Grad_out"))
def dgc_sparse_reduce(GatherBuff, k, Grad):
    k, parts = sparse_parts("dgc_sparse_reduce", GatherBuff.size, k, Grad.size)
    if parts == 0:
        return Grad
    out = np.array(Grad, copy=True)
    decode_gathered(out.reshape(-1), np.ascontiguousarray(GatherBuff, np.float32).reshape(-1), k, parts)
    return out
