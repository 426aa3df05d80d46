"""AMP loss-scaling ops: check_finite_and_unscale and update_loss_scaling.

Mirrors Paddle's CPU kernels (``paddle/phi/kernels/cpu/amp_kernel.cc`` with
``paddle/phi/kernels/impl/amp_kernel_impl.h``; the op protos of
``paddle/fluid/operators/amp/``), which ``paddle.static.amp.decorate`` appends
after the backward pass:

* ``check_finite_and_unscale(X*, Scale) -> Out*, FoundInfinite``: the gradients
  are visited in order; while none so far held an inf/nan, each one is checked
  and, if finite, multiplied by ``1 / Scale`` (the reciprocal computed in double and
  rounded to the gradient's dtype); the one that holds an inf/nan and every later one is
  multiplied by 0 instead (so its infs become NaN). ``FoundInfinite`` is a bool
  tensor of shape [1]. Out is X (in place) in the programs Paddle builds.
* ``update_loss_scaling(X*, FoundInfinite, PrevLossScaling, InGoodSteps,
  InBadSteps, StopUpdate?) -> Out*, LossScaling, OutGoodSteps, OutBadSteps``:
  on an overflow every Out is set to 0 (the update is skipped). Then, unless
  ``stop_update`` (the ``StopUpdate`` tensor when given, else the attr):
  an overflow resets the good counter and counts a bad step; when the bad
  count reaches ``decr_every_n_nan_or_inf`` (equality, as Paddle) the scale
  becomes ``max(scale * decr_ratio, 1)`` and the bad count 0. A finite step
  resets the bad counter and counts a good one; at ``incr_every_n_steps`` the
  scale becomes ``scale * incr_ratio`` unless that overflows to inf (then it
  stays) and the good count 0. Counters are int32 [1].

Differences from Paddle: where Paddle leaves an output it does not write
untouched (LossScaling and the counters under ``stop_update``, Out when no
overflow happened), it is in place there; here those outputs receive the
input's value (Out: X's array itself), which is the same thing for the
in-place programs Paddle builds. On an overflow Out gets new zero arrays
(Paddle fills X's buffers). Paddle has no default for the four ratio/step attrs: an op appended
without them fails, as Paddle's attribute check fails, with InvalidArgument
naming the attr (and so does a kernel called without them).
"""
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from refimpl.core.errors import InvalidArgument

from .registry import register_op


def _infer_unscale(ins, attrs):
    return {"Out": list(ins.get("X") or []), "FoundInfinite": ((1,), "bool")}


def _one_value(op: str, slot: str, a: Any) -> Any:
    arr = np.asarray(a)
    if arr.size != 1:
        raise InvalidArgument(f"{op}: {slot} must hold exactly one value, got shape {list(arr.shape)}")
    return arr.reshape(-1)[0]


@register_op("check_finite_and_unscale", ["X*", "Scale"], ["Out*", "FoundInfinite"], {},
             infer_shape=_infer_unscale)
def check_finite_and_unscale(X: Sequence[np.ndarray], Scale: np.ndarray) -> Tuple[List[np.ndarray], np.ndarray]:
    scale = _one_value("check_finite_and_unscale", "Scale", Scale)
    found = False
    outs = []
    for x in X:
        x = np.asarray(x)
        inverse = x.dtype.type(1.0 / float(scale))  # Paddle: a double quotient stored in T
        if not found:
            found = not bool(np.isfinite(x).all())
        with np.errstate(invalid="ignore"):  # inf * 0 is the NaN Paddle writes too: no warning each overflow
            outs.append(x * (x.dtype.type(0) if found else inverse))
    return outs, np.array([found])


def _infer_update(ins, attrs):
    _check_attrs(attrs)
    out = {"Out": list(ins.get("X") or [])}
    for o, i in (("LossScaling", "PrevLossScaling"), ("OutGoodSteps", "InGoodSteps"),
                 ("OutBadSteps", "InBadSteps")):
        if ins.get(i):
            out[o] = ins[i][0]
    return out


_REQUIRED = ("incr_every_n_steps", "decr_every_n_nan_or_inf", "incr_ratio", "decr_ratio")


def _check_attrs(attrs) -> None:
    """Paddle's attribute checker: these four have no default (``Attribute (...) is not set correctly``)."""
    for name in _REQUIRED:
        if attrs.get(name) is None:
            raise InvalidArgument(f"update_loss_scaling: attr {name!r} is not set (Paddle has no default for it)")


def next_loss_scaling(found: bool, scale: np.ndarray, good: int, bad: int, incr_every_n_steps: int,
                      decr_every_n_nan_or_inf: int, incr_ratio: float,
                      decr_ratio: float) -> Tuple[np.ndarray, int, int]:
    """Paddle's ``Update``: the new (scale, good steps, bad steps) after one step (scale: a float scalar)."""
    dt = scale.dtype.type
    if found:
        good, bad = 0, bad + 1
        if bad == decr_every_n_nan_or_inf:
            new = scale * dt(decr_ratio)
            scale, bad = (dt(1) if new < dt(1) else new), 0
    else:
        good, bad = good + 1, 0
        if good == incr_every_n_steps:
            new = scale * dt(incr_ratio)
            scale, good = (new if np.isfinite(new) else scale), 0
    return scale, good, bad


@register_op("update_loss_scaling", ["X*", "FoundInfinite", "PrevLossScaling", "InGoodSteps", "InBadSteps",
                                     "StopUpdate?"],
             ["Out*", "LossScaling", "OutGoodSteps", "OutBadSteps"],
             {"incr_every_n_steps": None, "decr_every_n_nan_or_inf": None, "incr_ratio": None,
              "decr_ratio": None, "stop_update": False},
             infer_shape=_infer_update)
def update_loss_scaling(X: Sequence[np.ndarray], FoundInfinite: np.ndarray, PrevLossScaling: np.ndarray,
                        InGoodSteps: np.ndarray, InBadSteps: np.ndarray, StopUpdate: Optional[np.ndarray], *,
                        incr_every_n_steps: int, decr_every_n_nan_or_inf: int, incr_ratio: float,
                        decr_ratio: float, stop_update: bool) -> tuple:
    attrs = dict(incr_every_n_steps=incr_every_n_steps, decr_every_n_nan_or_inf=decr_every_n_nan_or_inf,
                 incr_ratio=incr_ratio, decr_ratio=decr_ratio)
    _check_attrs(attrs)
    found = bool(_one_value("update_loss_scaling", "FoundInfinite", FoundInfinite))
    outs = [np.zeros_like(x) if found else x for x in X]  # no overflow: Out is X, untouched (as Paddle)
    scale = _one_value("update_loss_scaling", "PrevLossScaling", PrevLossScaling)
    good = int(_one_value("update_loss_scaling", "InGoodSteps", InGoodSteps))
    bad = int(_one_value("update_loss_scaling", "InBadSteps", InBadSteps))
    stop = bool(_one_value("update_loss_scaling", "StopUpdate", StopUpdate)) if StopUpdate is not None \
        else bool(stop_update)
    if not stop:
        scale, good, bad = next_loss_scaling(found, scale, good, bad, **attrs)
    shape = np.shape(PrevLossScaling)
    return (outs, np.full(shape, scale, dtype=np.asarray(PrevLossScaling).dtype),
            np.full(np.shape(InGoodSteps), good, dtype=np.int32), np.full(np.shape(InBadSteps), bad, dtype=np.int32))


__all__: list = []
