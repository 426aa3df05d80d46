"""static.gradients: the grad ops from some targets back to some inputs.

Mirrors ``paddle.static.gradients`` → ``calc_gradient`` → ``calc_gradient_helper`` of
``python/paddle/base/backward.py`` (legacy IR): each target without a given gradient is
seeded by ``fill_any_like(target, value=1.0, dtype=target.dtype)`` named ``target@GRAD``
(role Backward, the target op is not marked as a loss); the forward path is the ops reached
from the inputs that also lead to the targets; the grad ops come from the same steps as
``append_backward`` (rename-and-sum, no-grad pruning) but carry no ``op_role_var``. From the
second call on the same program a grad output whose name already exists gets the prefix
``grad/`` once per call (``grad/grad/x@GRAD``), and grad ops whose grad inputs were not
produced in this call are dropped. Differences: ops with an empty grad maker are not
recognised while finding the path; sub-block (control-flow) ops are not supported.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from refimpl.core.dtypes import to_vartype
from refimpl.core.errors import InvalidArgument, Unimplemented
from refimpl.framework import unique_name
from refimpl.framework.op_role import OpRole, OP_DEVICE_ATTR, OP_ROLE_ATTR, OP_ROLE_VAR_ATTR
from refimpl.framework.variable import Variable
from refimpl.ops.grad_maker import make_grad_op_descs
from refimpl.ops.registry import GRAD_SUFFIX, grad_var_name

__all__ = ["gradients"]


def _as_vars(value: Any, arg: str, allow_none: bool = False) -> List[Any]:
    if value is None and allow_none:
        return []
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    for v in items:
        if not isinstance(v, Variable) and not (allow_none and v is None):
            raise InvalidArgument(f"paddle.static.gradients: {arg} must be a Variable or a list of "
                                  f"Variables, got {type(v).__name__}")
    return items


def _find_op_path(ops: Sequence[Any], target_names: Set[str], input_names: Set[str],
                   no_grad: Set[str]) -> List[Any]:
    """Ops reached from the inputs that also lead to the targets (Paddle's ``_find_op_path_``)."""
    reached, from_inputs = set(input_names), []
    for op in ops:
        if any(n in reached for n in op.input_arg_names):
            reached.update(n for n in op.output_arg_names if n not in no_grad)
            from_inputs.append(op)
    from .backward import _op_path
    return _op_path(from_inputs, target_names, no_grad)


def _grad_descs(block: Any, path: Sequence[Any], no_grad_grads: Set[str], times: int, seed_names: Set[str],
                rename_map: Dict[str, str]) -> Tuple[List[Dict[str, Any]], Dict[str, str]]:
    """Grad op descs of ``path`` in reverse, renamed and filtered as a repeated call needs."""
    descs, grad_to_var = [], {}
    produced = set(seed_names) if times > 1 else None
    for op in reversed(path):
        if op.has_attr("sub_block"):
            raise Unimplemented(f"paddle.static.gradients: op {op.type!r} has a sub-block; "
                                "control-flow backward is not supported")
        ds, g2v = make_grad_op_descs(op.type, op.inputs, op.outputs, op.all_attrs(), no_grad_grads)
        for d in ds:
            d["attrs"].setdefault(OP_DEVICE_ATTR, op.attr(OP_DEVICE_ATTR) if op.has_attr(OP_DEVICE_ATTR) else "")
            if times > 1:
                _prefix_existing_outputs(block, d, op.input_arg_names, times, rename_map, g2v)
        if produced is not None:
            grad_ins = [n for d in ds for ns in d["inputs"].values() for n in ns
                        if GRAD_SUFFIX in n or n in produced]
            if not grad_ins or not any(n in produced for n in grad_ins):
                continue
            produced.update(n for d in ds for ns in d["outputs"].values() for n in ns)
        descs.extend(ds)
        grad_to_var.update(g2v)
    return descs, grad_to_var


def _prefix_existing_outputs(block: Any, desc: Dict[str, Any], fwd_inputs: List[str], times: int,
                             rename_map: Dict[str, str], g2v: Dict[str, str]) -> None:
    """Read renamed grads; write a grad whose name exists under ``'grad/' * times + name``."""
    for k, names in desc["inputs"].items():
        desc["inputs"][k] = [rename_map.get(n, n) if n not in fwd_inputs else n for n in names]
    for k, names in desc["outputs"].items():
        new_names = []
        for n in names:
            if GRAD_SUFFIX in n and n in block.vars:
                new = "grad/" * times + n
                rename_map[n] = new
                if n in g2v:
                    g2v[new] = g2v.pop(n)
                n = new
            new_names.append(n)
        desc["outputs"][k] = new_names


def _rename_grads(block: Any, start: int, grad_to_var: Dict[str, str], target_grad_map: Dict[str, str],
                  keep: Set[str]) -> None:
    """Given target gradients replace ``target@GRAD``; existing grad names get a unique name
    (Paddle's ``_rename_grad_``)."""
    var_map = dict(target_grad_map)
    for op in block.ops[start:]:
        for n in set(op.input_arg_names) & set(var_map):
            op._rename_input(n, var_map[n])
        for n in op.output_arg_names:
            if GRAD_SUFFIX in n and n in block.vars and n not in keep:
                var_map[n] = unique_name.generate(n)
                op._rename_output(n, var_map[n])
    for g, ng in var_map.items():
        if g in grad_to_var:
            grad_to_var[ng] = grad_to_var.pop(g)


def _seed(block: Any, target: Variable) -> None:
    block._append_desc_op("fill_any_like", {"X": [target.name]}, {"Out": [grad_var_name(target.name)]},
                          {"value": 1.0, "dtype": to_vartype(target.dtype), OP_ROLE_ATTR: OpRole.Backward,
                           OP_DEVICE_ATTR: "", OP_ROLE_VAR_ATTR: [], "op_namescope": ""})


def gradients(targets: Any, inputs: Any, target_gradients: Any = None,
              no_grad_set: Any = None) -> List[Optional[Variable]]:
    """Append the grad ops of ``targets`` w.r.t. ``inputs``; the grad of each input (None if unreached)."""
    from .backward import _create_grad_vars, _names, _no_grad_outputs, addup_repetitive_outputs, \
        remove_no_grad_branch
    targets = _as_vars(targets, "targets")
    inputs = _as_vars(inputs, "inputs")
    given = _as_vars(target_gradients, "target_gradients", allow_none=True) or [None] * len(targets)
    if len(given) != len(targets):
        raise InvalidArgument(f"paddle.static.gradients: target_gradients has {len(given)} entries "
                              f"but targets has {len(targets)}; they must have the same number")
    block = targets[0].block
    program = block.program
    if block.idx != 0:
        raise Unimplemented("paddle.static.gradients: the targets must live in the global block")
    for v in list(targets) + list(inputs):
        if v.block.program is not program:
            raise InvalidArgument(f"paddle.static.gradients: {v.name!r} is not in the program of the targets")
    times = getattr(program, "_appending_grad_times", 0) + 1
    program._appending_grad_times = times
    no_grad = {v.name for v in block.vars.values() if v.stop_gradient} | _names(no_grad_set)
    start = len(block.ops)
    seeds, target_grad_map = set(), {}
    for t, g in zip(targets, given):
        if g is None:
            _seed(block, t)
            seeds.add(grad_var_name(t.name))
        elif tuple(t.shape) != tuple(g.shape):
            raise InvalidArgument(f"paddle.static.gradients: the shapes of target and grad are different: "
                                  f"{t.name} {list(t.shape)} vs {g.name} {list(g.shape)}")
        else:
            target_grad_map[grad_var_name(t.name)] = g.name
    target_names = {t.name for t in targets}
    path = _find_op_path(block.ops[:start], target_names, {v.name for v in inputs}, no_grad)
    no_grad |= _no_grad_outputs(block, path, target_names, no_grad)
    no_grad_grads = {grad_var_name(n) for n in no_grad}
    rename_map = dict(target_grad_map) if times > 1 else {}
    descs, grad_to_var = _grad_descs(block, path, no_grad_grads, times,
                                     seeds | set(target_grad_map.values()), rename_map)
    descs = addup_repetitive_outputs(descs, block.idx)
    descs = remove_no_grad_branch(descs, no_grad_grads)
    for d in descs:
        attrs = dict(d["attrs"], **{OP_ROLE_ATTR: OpRole.Backward})
        attrs.setdefault(OP_ROLE_VAR_ATTR, [])
        attrs.setdefault("op_namescope", "")
        block._append_desc_op(d["type"], d["inputs"], d["outputs"], attrs)
    _rename_grads(block, start, grad_to_var, target_grad_map, seeds)
    grad_info = _create_grad_vars(block, start, grad_to_var)
    return [block.vars.get(grad_info[v.name]) if v.name in grad_info else None for v in inputs]
