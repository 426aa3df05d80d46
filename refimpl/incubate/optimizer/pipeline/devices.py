"""Which device (pipeline stage) each op runs on, and the checks of a device-annotated program.

Mirrors ``_add_op_device_attr``, ``_add_op_device_attr_for_op``, ``_check_validation`` and the op-role
predicates of Paddle 3.3.1's ``python/paddle/incubate/optimizer/pipeline.py``. An op placed by
``device_guard("gpu:k")`` keeps its device; the ops the optimizer, AMP and gradient clipping add without
one are placed as Paddle places them: LR ops and the global-norm ``sum``/``sqrt``/... on every stage
(``"gpu:all"``), a clip or weight-decay op on its parameter's stage, an AMP cast or scale after the op that
wrote its input, a ``sum`` of ``@RENAME@`` gradients before the op that reads it. Differences: Paddle's
``assert``s are typed errors here (each also an ``AssertionError``) naming the op and the device; refimpl's
own stage spelling ``"stage:k"`` is read as ``"gpu:k"`` (on the ops and in the inner optimizer's
``_param_device_map``, see :func:`translate_device`); a device that is not ``gpu:<int>`` or ``gpu:all``
(``"gpu"``, ``"gpu:x"``) is refused naming the op (Paddle fails there on a bare ``IndexError``).
"""
from __future__ import annotations

import re
from functools import cmp_to_key
from typing import Any, List, Optional

from refimpl.core.errors import InvalidArgument
from refimpl.framework.op_role import OP_DEVICE_ATTR, OP_ROLE_ATTR, OP_ROLE_VAR_ATTR, OpRole

__all__ = ["PipelineBuildError", "DeviceMixin", "GRAD_SUFFIX", "translate_device"]

GRAD_SUFFIX = "@GRAD"
#: the roles Paddle's SectionWorker runs (section_worker.cc)
VALID_ROLES = (OpRole.LRSched, OpRole.Forward, OpRole.Backward, OpRole.Loss, OpRole.Optimize,
               OpRole.Backward | OpRole.Loss)
_OTHER_KNOWN = ("update_loss_scaling", "reduce_any", "concat", "sum", "check_finite_and_unscale", "memcpy")
_CLIP_ON_ALL = ("sum", "sqrt", "fill_constant", "elementwise_max", "elementwise_div")


class PipelineBuildError(InvalidArgument, AssertionError):
    """A program the legacy pipeline builder refuses (Paddle asserts there)."""


_STAGE_DEVICE = re.compile(r"gpu:\d+")


def translate_device(device: str, kind: str = "gpu") -> str:
    """refimpl's ``"stage:k"`` spelled as Paddle's ``"<kind>:k"``; any other device as it is."""
    if isinstance(device, str) and device.startswith("stage:"):
        return f"{kind}:{device.split(':', 1)[1]}"
    return device


def _device_index(device: str) -> int:
    return int(device.split(":")[1])  # _check_validation let only gpu:<int> through


class DeviceMixin:
    """Op-role predicates and op placement of :class:`PipelineOptimizer`."""

    _device: str
    _param_device_map: Any

    # ---- op roles (Paddle's _is_*_op) -----------------------------------------------------
    @staticmethod
    def _role(op) -> int:
        return int(op.attr(OP_ROLE_ATTR)) if op.has_attr(OP_ROLE_ATTR) else 0

    def _is_loss_grad_op(self, op) -> bool:
        role = self._role(op)
        return bool(role & OpRole.Backward and role & OpRole.Loss)

    def _is_forward_op(self, op) -> bool:
        return op.has_attr(OP_ROLE_ATTR) and self._role(op) == OpRole.Forward

    def _is_backward_op(self, op) -> bool:
        return op.has_attr(OP_ROLE_ATTR) and bool(self._role(op) & OpRole.Backward)

    def _is_loss_op(self, op) -> bool:
        return self._role(op) == OpRole.Loss

    def _is_optimize_op(self, op) -> bool:
        return op.has_attr(OP_ROLE_ATTR) and bool(self._role(op) & OpRole.Optimize)

    def _is_update_op(self, op) -> bool:
        return all(s in op.input_names for s in ("Param", "Grad", "LearningRate"))

    @staticmethod
    def _namescope(op) -> str:
        return op.attr("op_namescope") if op.has_attr("op_namescope") else ""

    def _is_gradient_clip_op(self, op) -> bool:
        return self._namescope(op).startswith("/gradient_clip")

    def _is_regularization_op(self, op) -> bool:
        return self._namescope(op).startswith("/regularization")

    def _is_weight_decay_op(self, op) -> bool:
        return "weight decay" in self._namescope(op)

    @staticmethod
    def _strip_grad_suffix(name: str) -> str:
        pos = name.find(GRAD_SUFFIX)
        return name[:pos] if pos != -1 else name

    @staticmethod
    def _append_grad_suffix(name: str) -> str:
        return name + GRAD_SUFFIX

    # ---- devices ---------------------------------------------------------------------------
    def _normalise_device(self, op) -> None:
        """refimpl's ``device_guard("stage:k")`` spelled as Paddle's ``gpu:k``."""
        device = op.attr(OP_DEVICE_ATTR) if op.has_attr(OP_DEVICE_ATTR) else ""
        if device.startswith("stage:"):
            op._set_attr(OP_DEVICE_ATTR, translate_device(device, self._device))

    def _get_op_device_attr(self, op) -> Optional[str]:
        device = op.attr(OP_DEVICE_ATTR) if op.has_attr(OP_DEVICE_ATTR) else None
        if device and device[:3] != "gpu":
            raise PipelineBuildError(f"PipelineOptimizer: op {op.type!r} is on device {device!r}; only gpu "
                                     f"devices are supported in pipeline parallelism")
        return device

    def _param_device(self, op, param_name: str) -> str:
        if param_name not in self._param_device_map:
            raise PipelineBuildError(f"PipelineOptimizer: op {op.type!r} belongs to parameter {param_name!r}, "
                                     f"whose device the optimizer does not know (_param_device_map)")
        return self._param_device_map[param_name]

    def _device_of_neighbour(self, op, found, var_name: str, where: str) -> str:
        if found is None or not found.has_attr(OP_DEVICE_ATTR) or not found.attr(OP_DEVICE_ATTR):
            raise PipelineBuildError(f"PipelineOptimizer: op {op.type!r} has no op_device and the {where} op "
                                     f"of its var {var_name!r} gives none")
        return found.attr(OP_DEVICE_ATTR)

    def _add_op_device_attr_for_op(self, op, idx: int, block) -> None:
        """Place one op that ``device_guard`` did not place (Paddle's rules, in Paddle's order)."""
        all_dev = f"{self._device}:all"
        if self._role(op) == OpRole.LRSched:
            op._set_attr(OP_DEVICE_ATTR, all_dev)
        elif op.type == "sum" and self._is_backward_op(op):
            for name in op.input_arg_names:
                if "@RENAME@" not in name:
                    raise PipelineBuildError(f"PipelineOptimizer: a backward sum without op_device must add "
                                             f"@RENAME@ vars, but it reads {name!r}")
            out = op.output_arg_names[0]
            op._set_attr(OP_DEVICE_ATTR, self._device_of_neighbour(op, self._find_post_op(idx, out), out, "next"))
        elif op.type in ("cast", "scale") and (self._is_backward_op(op) or self._is_forward_op(op)):
            x = op.input("X")[0]
            op._set_attr(OP_DEVICE_ATTR, self._device_of_neighbour(op, self._find_prev_op(idx, x), x, "previous"))
        elif op.type == "memcpy" and not self._is_optimize_op(op):
            out = op.output_arg_names[0]
            if "@Fetch" in out:
                near = self._device_of_neighbour(op, self._find_post_op(idx, out), out, "next")
            else:
                x = op.input("X")[0]
                near = self._device_of_neighbour(op, self._find_prev_op(idx, x), x, "previous")
            op._set_attr(OP_DEVICE_ATTR, near)
        elif self._is_loss_op(op):  # loss * loss_scaling added by AMP: the device of the next placed op
            offset = 1
            while idx + offset < len(block.ops) and not self._get_op_device_attr(block.ops[idx + offset]):
                offset += 1
            if idx + offset >= len(block.ops):
                raise PipelineBuildError(f"PipelineOptimizer: loss op {op.type!r} has no op_device; put the "
                                         f"program within device_guard scope")
            device = block.ops[idx + offset].attr(OP_DEVICE_ATTR)
            for i in range(offset):
                block.ops[idx + i]._set_attr(OP_DEVICE_ATTR, device)
        elif self._is_optimize_op(op) and op.type == "cast":  # fp16 -> fp32 gradient cast of AMP
            op._set_attr(OP_DEVICE_ATTR, self._param_device(op, self._strip_grad_suffix(op.output("Out")[0])))
        elif self._is_gradient_clip_op(op) or self._is_regularization_op(op):
            role_var = op.attr(OP_ROLE_VAR_ATTR) if op.has_attr(OP_ROLE_VAR_ATTR) else []
            if len(role_var) != 2:
                raise PipelineBuildError(f"PipelineOptimizer: gradient clip / regularization op {op.type!r} must "
                                         f"have an op_role_var of two names, got {list(role_var)}")
            device = self._param_device(op, role_var[0])
            op._set_attr(OP_DEVICE_ATTR, all_dev if op.type in _CLIP_ON_ALL else device)
        elif op.type in ("alloc_float_status", "clear_float_status"):
            op._set_attr(OP_DEVICE_ATTR, all_dev)
            op._set_attr(OP_ROLE_ATTR, OpRole.LRSched)
            block.var(op.output_arg_names[0]).persistable = True
        else:
            if op.type not in _OTHER_KNOWN or not self._is_optimize_op(op):
                raise PipelineBuildError(f"PipelineOptimizer: op {op.type!r} has no op_device; ops without one "
                                         f"must be optimize ops of {list(_OTHER_KNOWN)}")
            op._set_attr(OP_DEVICE_ATTR, all_dev)

    def _add_op_device_attr(self, block) -> None:
        for op in block.ops:
            self._normalise_device(op)
        for idx, op in enumerate(list(block.ops)):
            if op.type in ("create_py_reader", "read", "create_double_buffer_reader"):
                op._set_attr(OP_DEVICE_ATTR, f"{self._device}:all")
                continue
            if self._get_op_device_attr(op):
                continue
            self._add_op_device_attr_for_op(op, idx, block)

    def _check_validation(self, block) -> List[str]:
        """Every op has a valid role and a device; the devices in order of first use."""
        devices: List[str] = []
        for op in block.ops:
            if not op.has_attr(OP_ROLE_ATTR):
                raise PipelineBuildError(f"PipelineOptimizer: op {op.type!r} has no op_role attribute")
            role = self._role(op)
            if role not in VALID_ROLES:
                raise PipelineBuildError(f"PipelineOptimizer: op_role {role} of op {op.type!r} must be one of "
                                         f"{list(VALID_ROLES)}")
            device = op.attr(OP_DEVICE_ATTR) if op.has_attr(OP_DEVICE_ATTR) else ""
            if not device:
                raise PipelineBuildError(f"PipelineOptimizer: op_device attribute for op {op.type!r} has not "
                                         f"been set")
            if device == f"{self._device}:all":
                continue
            if device.split(":")[0] != "gpu":
                raise PipelineBuildError(f"PipelineOptimizer: op {op.type!r} is on device {device!r}; only gpu "
                                         f"devices are supported for pipeline parallelism")
            if not _STAGE_DEVICE.fullmatch(device):
                raise PipelineBuildError(f"PipelineOptimizer: op {op.type!r} is on device {device!r}; a pipeline "
                                         f"device must be 'gpu:<stage id>' (e.g. 'gpu:0') or 'gpu:all'")
            if device not in devices:
                devices.append(device)
        return devices

    @staticmethod
    def _check_device_order(devices: List[str]) -> None:
        ordered = sorted(devices, key=cmp_to_key(lambda a, b: _device_index(a) - _device_index(b)))
        if ordered != devices:
            raise PipelineBuildError(f"PipelineOptimizer: with pipeline parallelism, you must use gpu devices one "
                                     f"after another in the order of their ids; the program uses {devices}")
