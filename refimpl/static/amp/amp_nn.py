"""The two loss-scaling ops as static layers: ``check_finite_and_unscale`` and ``update_loss_scaling``.

Mirrors Paddle 3.3.1's ``python/paddle/static/amp/amp_nn.py`` (legacy-IR
branch): each appends one op whose outputs are its inputs (the gradients are
unscaled in place; the scale and the good / bad step counters are updated in
place). The kernels are ``refimpl/ops/amp_ops.py``'s. Paddle checks input
dtypes with asserts; here a wrong dtype is an ``InvalidArgument`` naming the op
and the variable.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple, Union

from refimpl.core.errors import InvalidArgument
from refimpl.framework.variable import Variable
from refimpl.static.layer_helper import LayerHelper

__all__ = ["check_finite_and_unscale", "update_loss_scaling"]

_GRAD_DTYPES = ("float16", "float32", "float64", "bfloat16")


def _check_list(op: str, x: Any) -> None:
    if not isinstance(x, (list, tuple)):
        raise InvalidArgument(f"{op}: x must be a list or tuple of Variables, got {type(x).__name__}")
    for e in x:
        if not isinstance(e, Variable) or e.dtype not in _GRAD_DTYPES:
            raise InvalidArgument(f"{op}: every x must be a float16/float32/float64/bfloat16 Variable, "
                                  f"got {getattr(e, 'name', e)!r} of dtype {getattr(e, 'dtype', None)}")


def check_finite_and_unscale(x: Sequence[Variable], scale: Variable, name: Optional[str] = None,
                             float_status: Any = None) -> Tuple[Sequence[Variable], Variable]:
    """``x / scale`` in place unless some ``x`` holds inf / nan; returns (x, found_inf: a bool Variable)."""
    helper = LayerHelper("check_finite_and_unscale", name=name)
    found_inf = helper.create_variable_for_type_inference(dtype="bool")
    _check_list("check_finite_and_unscale", x)
    helper.append_op(type="check_finite_and_unscale", inputs={"X": list(x), "Scale": scale},
                     outputs={"Out": list(x), "FoundInfinite": found_inf})
    return x, found_inf


def update_loss_scaling(x: Sequence[Variable], found_inf: Variable, prev_loss_scaling: Variable,
                        num_good_steps: Variable, num_bad_steps: Variable, incr_every_n_steps: int,
                        decr_every_n_nan_or_inf: int, incr_ratio: float, decr_ratio: float,
                        stop_update: Union[bool, Variable] = False, name: Optional[str] = None) -> List[Variable]:
    """Grow the scale after ``incr_every_n_steps`` finite steps, shrink it after ``decr_every_n_nan_or_inf``
    overflowing ones (zeroing ``x`` on overflow); appends one ``update_loss_scaling`` op."""
    if prev_loss_scaling.dtype not in ("float32", "float64"):
        raise InvalidArgument(f"update_loss_scaling: prev_loss_scaling {prev_loss_scaling.name!r} must be "
                              f"float32 or float64, got {prev_loss_scaling.dtype}")
    _check_list("update_loss_scaling", x)
    for e in x:
        want = "float32" if e.dtype in ("float16", "bfloat16") else e.dtype
        if prev_loss_scaling.dtype != want:
            raise InvalidArgument(f"update_loss_scaling: the dtype of prev_loss_scaling ({prev_loss_scaling.dtype}) "
                                  f"must be {want} for {e.name!r} of dtype {e.dtype}")
    helper = LayerHelper("update_loss_scaling", name=name)
    inputs = {"X": list(x), "FoundInfinite": found_inf, "PrevLossScaling": prev_loss_scaling,
              "InGoodSteps": num_good_steps, "InBadSteps": num_bad_steps}
    outputs = {"Out": list(x), "LossScaling": prev_loss_scaling, "OutGoodSteps": num_good_steps,
               "OutBadSteps": num_bad_steps}
    attrs = {"incr_every_n_steps": incr_every_n_steps, "decr_every_n_nan_or_inf": decr_every_n_nan_or_inf,
             "incr_ratio": incr_ratio, "decr_ratio": decr_ratio}
    if isinstance(stop_update, Variable):
        inputs["StopUpdate"] = stop_update
    else:
        attrs["stop_update"] = stop_update
    helper.append_op(type="update_loss_scaling", inputs=inputs, outputs=outputs, attrs=attrs)
    return list(x)
