"""``paddle.nn.ClipGradByValue``, ``ClipGradByNorm``, ``ClipGradByGlobalNorm``.

Mirrors the legacy static-graph path (``_static_clip``) of
``python/paddle/nn/clip.py``. An optimizer built with ``grad_clip=`` calls
the clip object on its sorted ``(param, grad)`` pairs before regularization
and the update ops; every op it appends is in the ``gradient_clip`` name scope
under the Optimize role with ``op_role_var = [param, grad]``, and afterwards
each such op's ``op_role_var`` names the clipped gradient (Paddle's
``_correct_clip_op_role_var``). Parameters created with
``ParamAttr(need_clip=False)`` are passed through unclipped.

- ``ClipGradByValue(max, min=None)``: one ``clip`` op per gradient into
  ``clip_N.tmp_0``.
- ``ClipGradByNorm(clip_norm)``: one ``clip_by_norm`` op per gradient into
  ``clip_by_norm_N.tmp_0``.
- ``ClipGradByGlobalNorm(clip_norm)``: ``squared_l2_norm`` per gradient, their
  ``sum`` (``add_n``), ``sqrt``, ``fill_constant(clip_norm)``,
  ``elementwise_max``, ``elementwise_div`` and an in-place
  ``elementwise_mul`` of every gradient by that scale.

Differences: ``ClipGradByGlobalNorm`` builds the program of Paddle 2.6.2, the
last release whose static graph was the legacy IR (Paddle 3.3.1's legacy path
calls ``paddle.sqrt``, which accepts only PIR values there, and raises); the
float16 / bfloat16 master-gradient casts of Paddle's global-norm clip and
SELECTED_ROWS gradients are not supported; a negative ``clip_norm`` or an
empty ``[min, max]`` raises InvalidArgument where Paddle asserts or accepts it.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple, TYPE_CHECKING

from refimpl.core.dtypes import to_vartype
from refimpl.core.errors import InvalidArgument, Unimplemented
from refimpl.framework import unique_name
from refimpl.framework.program import default_main_program, name_scope

if TYPE_CHECKING:
    from refimpl.framework.variable import Parameter, Variable

__all__ = ["ClipGradByGlobalNorm", "ClipGradByNorm", "ClipGradByValue"]

ParamsGrads = List[Tuple["Parameter", Optional["Variable"]]]


def _number(cls: str, arg: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{cls}: {arg} must be a float, got {value!r}")
    return float(value)


def _needs_clip(p) -> bool:
    return getattr(p, "need_clip", True) is not False


def _tmp(key: str, like: Variable, shape=None, stop_gradient: bool = False) -> Variable:
    """A temporary ``{key}_N.tmp_0`` as Paddle's ``LayerHelper(key).create_variable_for_type_inference``."""
    name = unique_name.generate_with_ignorable_key(f"{unique_name.generate(key)}.tmp")
    return default_main_program().current_block().create_var(
        name=name, dtype=like.dtype, shape=list(like.shape) if shape is None else shape,
        persistable=False, stop_gradient=stop_gradient)


def _append(op_type: str, inputs, out: Variable, attrs=None) -> Variable:
    default_main_program().current_block().append_op(type=op_type, inputs=inputs, outputs={"Out": [out]},
                                                     attrs=attrs or {})
    return out


def _correct_clip_op_role_var(params_grads: ParamsGrads, new_grad_names: Dict[str, str]) -> None:
    """Point the ``op_role_var`` of every gradient-clip op at the clipped gradient."""
    if not new_grad_names or not params_grads:
        return
    for op in params_grads[0][0].block.program.global_block().ops:
        if not op.has_attr("op_namescope") or "gradient_clip" not in op.attr("op_namescope"):
            continue
        role_var = op.attr("op_role_var")
        if role_var and role_var[0] in new_grad_names:
            op._set_attr("op_role_var", [role_var[0], new_grad_names[role_var[0]]])


class ClipGradBase:
    """Base of the gradient clips: ``clip(params_grads)`` returns the clipped pairs."""

    def __str__(self) -> str:
        raise NotImplementedError

    def __call__(self, params_grads: Sequence[Tuple[Parameter, Optional[Variable]]]) -> ParamsGrads:
        return self._static_clip(list(params_grads))

    def _static_clip(self, params_grads: ParamsGrads) -> ParamsGrads:
        raise NotImplementedError

    def _clip_each(self, params_grads: ParamsGrads, clip_one) -> ParamsGrads:
        """Replace every clippable gradient by ``clip_one(g)``, each under its own optimized guard."""
        out, new_names = [], {}
        with name_scope("gradient_clip"):
            for p, g in params_grads:
                if g is None:
                    continue
                if not _needs_clip(p):
                    out.append((p, g))
                    continue
                with p.block.program._optimized_guard([p, g]):
                    new_g = clip_one(g)
                out.append((p, new_g))
                new_names[p.name] = new_g.name
        _correct_clip_op_role_var(out, new_names)
        return out


class ClipGradByValue(ClipGradBase):
    """Clip every gradient element into ``[min, max]`` (``min`` defaults to ``-max``)."""

    def __init__(self, max: float, min: Optional[float] = None) -> None:
        hi = _number("ClipGradByValue", "max", max)
        if min is None:
            if hi <= 0:
                raise InvalidArgument(f"ClipGradByValue: max must be > 0 when min is None, got {hi}")
            lo = -hi
        else:
            lo = _number("ClipGradByValue", "min", min)
        if lo > hi:
            raise InvalidArgument(f"ClipGradByValue: min ({lo}) must be <= max ({hi})")
        self.max, self.min = hi, lo

    def __str__(self) -> str:
        return f"Clip Gradient By Value, min = {self.min:f}, max={self.max:f}"

    def _static_clip(self, params_grads: ParamsGrads) -> ParamsGrads:
        return self._clip_each(params_grads, lambda g: _append(
            "clip", {"X": [g]}, _tmp("clip", g), {"min": self.min, "max": self.max}))


class ClipGradByNorm(ClipGradBase):
    """Scale each gradient whose L2 norm exceeds ``clip_norm`` down to norm ``clip_norm``."""

    def __init__(self, clip_norm: float) -> None:
        self.clip_norm = _number("ClipGradByNorm", "clip_norm", clip_norm)
        if self.clip_norm < 0:
            raise InvalidArgument(f"ClipGradByNorm: clip_norm must be >= 0, got {self.clip_norm}")

    def __str__(self) -> str:
        return "Gradient Clip By Norm, clip_norm=%f" % self.clip_norm

    def _static_clip(self, params_grads: ParamsGrads) -> ParamsGrads:
        return self._clip_each(params_grads, lambda g: _append(
            "clip_by_norm", {"X": [g]}, _tmp("clip_by_norm", g), {"max_norm": self.clip_norm}))


class ClipGradByGlobalNorm(ClipGradBase):
    """Scale all gradients by ``clip_norm / max(clip_norm, global_norm)``."""

    def __init__(self, clip_norm: float, group_name: str = "default_group", auto_skip_clip: bool = False) -> None:
        self.clip_norm = _number("ClipGradByGlobalNorm", "clip_norm", clip_norm)
        if self.clip_norm < 0:
            raise InvalidArgument(f"ClipGradByGlobalNorm: clip_norm must be >= 0, got {self.clip_norm}")
        if not isinstance(auto_skip_clip, bool):
            raise InvalidArgument(f"ClipGradByGlobalNorm: auto_skip_clip must be a bool, got {auto_skip_clip!r}")
        self.group_name, self.auto_skip_clip = group_name, auto_skip_clip

    def __str__(self) -> str:
        return "Gradient Clip By GlobalNorm, global_norm=%f" % self.clip_norm

    def _static_clip(self, params_grads: ParamsGrads) -> ParamsGrads:
        clipped = [(p, g) for p, g in params_grads if g is not None and _needs_clip(p)]
        if not clipped:
            return params_grads
        dtypes = {g.dtype for _, g in clipped}
        if len(dtypes) != 1 or dtypes & {"float16", "bfloat16"}:
            raise Unimplemented(f"ClipGradByGlobalNorm: gradients of dtype {sorted(dtypes)}; refimpl clips "
                                f"float32 or float64 gradients of one dtype")
        with name_scope("gradient_clip"):
            squares = []
            for p, g in clipped:
                with p.block.program._optimized_guard([p, g]):
                    squares.append(_append("squared_l2_norm", {"X": [g]}, _tmp("squared_l2_norm", g, [1])))
            p, g = clipped[-1]
            with p.block.program._optimized_guard([p, g]):
                scale = self._scale(squares, g)
            out = []
            for p, g in params_grads:
                if g is None:
                    continue
                if _needs_clip(p):
                    with p.block.program._optimized_guard([p, g]):
                        _append("elementwise_mul", {"X": [g], "Y": [scale]}, g, {"axis": -1})
                out.append((p, g))
        _correct_clip_op_role_var(out, {p.name: g.name for p, g in clipped})
        return out

    def _scale(self, squares: List[Variable], like: Variable) -> Variable:
        """``clip_norm / max(clip_norm, sqrt(sum(squares)))`` as Paddle 2.6.2 builds it."""
        total = _append("sum", {"X": squares}, _tmp("add_n", like, [1]),
                        {"use_mkldnn": False, "mkldnn_data_type": "float32"})
        norm = _append("sqrt", {"X": [total]}, _tmp("sqrt", like, [1]))
        unique_name.generate("fill_constant")  # paddle.full's fill_constant builds its LayerHelper twice
        max_norm = _append("fill_constant", {}, _tmp("fill_constant", like, [1], stop_gradient=True),
                           {"shape": [1], "dtype": to_vartype(like.dtype), "value": self.clip_norm,
                            "str_value": str(self.clip_norm), "force_cpu": False})
        block = default_main_program().current_block()
        biggest = block.create_var(name=unique_name.generate("elementwise_max"), dtype=like.dtype, shape=[1])
        _append("elementwise_max", {"X": [max_norm], "Y": [norm]}, biggest, {"axis": -1})
        ratio = block.create_var(name=unique_name.generate("elementwise_div"), dtype=like.dtype, shape=[1])
        return _append("elementwise_div", {"X": [max_norm], "Y": [biggest]}, ratio, {"axis": -1})


GradientClipBase = ClipGradBase
GradientClipByValue = ClipGradByValue
GradientClipByNorm = ClipGradByNorm
GradientClipByGlobalNorm = ClipGradByGlobalNorm
