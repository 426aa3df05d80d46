"""append_backward: add the gradient ops of a loss to its program.

Mirrors ``paddle.static.append_backward`` (legacy IR) step by step:
mark the loss op (role Forward|Loss), find the ops on the path to the loss,
seed ``loss@GRAD`` with a ``fill_constant`` (role Backward|Loss = 257), ask
each op's grad maker for its grad ops in reverse order, rename gradients
written by several ops to ``x@GRAD@RENAME@block0@k`` and add them up with a
``sum`` op before their first reader, drop grad ops nobody needs, create the
grad vars (shaped like their forward vars) and set ``op_role_var`` on the op
that finally produces each parameter's gradient. Sub-block (control-flow)
backward is not supported.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, TYPE_CHECKING, Tuple, Union

from refimpl.core.errors import InvalidArgument, Unimplemented
from refimpl.core.gc_pause import paused_cyclic_gc
from refimpl.framework.block import last_writers, splice_before
from refimpl.framework.op_role import OpRole, OP_DEVICE_ATTR, OP_ROLE_ATTR, OP_ROLE_VAR_ATTR
from refimpl.framework.variable import Variable
from refimpl.ops.grad_maker import make_grad_op_descs
from refimpl.ops.registry import GRAD_SUFFIX, grad_var_name, strip_grad_suffix

from .backward_recompute import recompute_grad_descs

if TYPE_CHECKING:
    from refimpl.framework.variable import Parameter


def _names(items):
    return {v if isinstance(v, str) else v.name for v in (items or ())}


def _op_path(ops, target_names, no_grad):
    """Forward ops whose outputs lead to the targets (Paddle's ``_find_op_path_``)."""
    wanted, keep = set(target_names), []
    for op in reversed(ops):
        if any(n in wanted for n in op.output_arg_names):
            wanted.update(n for n in op.input_arg_names if n not in no_grad)
            keep.append(op)
    return keep[::-1]


def _no_grad_outputs(block, path, target_names, no_grad):
    """Outputs of path ops that do not lead to the targets (Paddle's ``_find_no_grad_vars``)."""
    wanted, found = set(target_names), set()
    for op in reversed(path):
        if any(n in wanted for n in op.output_arg_names):
            for n in op.output_arg_names:
                v = block._find_var_recursive(n)
                if n not in wanted and n not in op.input_arg_names and v is not None and not v.stop_gradient:
                    found.add(n)
            wanted.update(n for n in op.input_arg_names if n not in no_grad)
    return found


def _rename(descs, old, new, begin, end):
    for d in descs[begin:end]:
        for slots in (d["inputs"], d["outputs"]):
            for k, names in slots.items():
                slots[k] = [new if n == old else n for n in names]


def _sum_op(var, parts, device):
    return {"type": "sum", "inputs": {"X": list(parts)}, "outputs": {"Out": [var]},
            "attrs": {OP_DEVICE_ATTR: device, "op_namescope": ""}}


def addup_repetitive_outputs(descs: List[Dict[str, Any]], block_idx: int) -> List[Dict[str, Any]]:
    """Rename gradients written more than once and sum them (``_addup_repetitive_outputs_``)."""
    pending, count, renamed, start, device = [], {}, {}, {}, {}
    mentions = {}  # name -> the pending sum ops that read or write it (renamed along with the descs)
    for idx, d in enumerate(descs):
        ins = [n for ns in d["inputs"].values() for n in ns]
        for n in ins:
            if GRAD_SUFFIX in n and len(renamed.get(n, ())) > 1:
                op = _sum_op(n, renamed[n], device.get(n, ""))
                pending.append((op, idx))
                for m in set(renamed[n]) | {n}:
                    mentions.setdefault(m, []).append(op)
                renamed[n], start[n] = [n], idx
        for slot, names in d["outputs"].items():
            for k, n in enumerate(list(names)):
                if GRAD_SUFFIX not in n or n in ins:
                    continue
                if not renamed.get(n):
                    renamed[n], start[n] = [n], idx
                    continue
                if len(renamed[n]) == 1:
                    first = f"{n}@RENAME@block{block_idx}@{count.get(n, 0)}"
                    count[n] = count.get(n, 0) + 1
                    renamed[n][0] = first
                    _rename(descs, n, first, start[n], idx)
                    touched = mentions.pop(n, [])
                    _rename(touched, n, first, 0, len(touched))
                    mentions.setdefault(first, []).extend(touched)
                    for earlier in list(d["outputs"])[:list(d["outputs"]).index(slot)]:
                        d["outputs"][earlier] = [first if x == n else x for x in d["outputs"][earlier]]
                    names = [first if x == n else x for x in names[:k]] + names[k:]
                new = f"{n}@RENAME@block{block_idx}@{count.get(n, 0)}"
                count[n] = count.get(n, 0) + 1
                names[k] = new
                d["outputs"][slot] = names
                renamed[n].append(new)
                device[n] = d["attrs"].get(OP_DEVICE_ATTR, "")
    for n, parts in renamed.items():
        if len(parts) > 1:
            pending.append((_sum_op(n, parts, device.get(n, "")), len(descs)))
    descs[:] = _insert_before(descs, pending)
    return descs


def _insert_before(descs, inserts):
    """``descs`` with each ``(desc, i)`` of ``inserts`` placed before ``descs[i]`` (in their order)."""
    groups = {}
    for d, i in inserts:
        groups.setdefault(i, []).append(d)
    return splice_before(descs, groups)


def remove_no_grad_branch(descs: List[Dict[str, Any]], no_grad: Set[str]) -> List[Dict[str, Any]]:
    """Drop grad ops that produce nothing needed; zero-fill needed-but-absent grads."""
    def removable(d):
        outs = [n for ns in d["outputs"].values() for n in ns]
        if not outs or all(n in no_grad for n in outs):
            return True
        grad_ins = [n for ns in d["inputs"].values() for n in ns if GRAD_SUFFIX in n]
        if grad_ins and all(n in no_grad for n in grad_ins):
            no_grad.update(outs)
            return True
        return False
    descs = [d for d in descs if not removable(d)]
    inserts = []
    for idx, d in enumerate(descs):
        for n in (n for ns in d["inputs"].values() for n in ns):
            if GRAD_SUFFIX in n and n in no_grad:
                inserts.append(({"type": "fill_any_like", "inputs": {"X": [strip_grad_suffix(n)]},
                                 "outputs": {"Out": [n]}, "attrs": {"value": 0.0, "dtype": -1}}, idx))
    return _insert_before(descs, inserts)


def _loss_grad_desc(loss):
    device = loss.op.attr(OP_DEVICE_ATTR) if loss.op is not None and loss.op.has_attr(OP_DEVICE_ATTR) else ""
    from refimpl.core.dtypes import to_vartype
    return {"type": "fill_constant", "inputs": {}, "outputs": {"Out": [grad_var_name(loss.name)]},
            "attrs": {"shape": list(loss.shape), "value": 1.0, "dtype": to_vartype(loss.dtype),
                      "force_cpu": False, OP_ROLE_ATTR: OpRole.Backward | OpRole.Loss,
                      OP_DEVICE_ATTR: device, "op_namescope": ""}}


@paused_cyclic_gc
def append_backward(loss: Variable, parameter_list: Optional[Sequence[Union[Parameter, str]]] = None,
                    no_grad_set: Optional[Iterable[Union[Variable, str]]] = None,
                    callbacks: Optional[Sequence[Callable[..., Any]]] = None,
                    checkpoints: Optional[Sequence[Any]] = None) -> List[Tuple[Parameter, Variable]]:
    """Append grad ops for ``loss``; return ``[(param, grad_var)]``."""
    if not isinstance(loss, Variable):
        raise InvalidArgument(f"append_backward: loss must be a Variable, got {type(loss).__name__}")
    block = loss.block
    program = block.program
    if block.idx != 0:
        raise Unimplemented("append_backward: the loss must live in the global block")
    if loss.op is None:
        raise InvalidArgument(f"append_backward: no op produces the loss {loss.name!r}")
    loss.op._set_attr(OP_ROLE_ATTR, OpRole.Forward | OpRole.Loss)
    no_grad = {v.name for v in block.vars.values() if v.stop_gradient} | _names(no_grad_set)
    fwd_ops = list(block.ops)
    path = _op_path(fwd_ops, {loss.name}, no_grad)
    no_grad |= _no_grad_outputs(block, path, {loss.name}, no_grad)
    no_grad_grads = {grad_var_name(n) for n in no_grad}

    def finish(descs):
        descs = addup_repetitive_outputs(descs, block.idx)
        return remove_no_grad_branch(descs, no_grad_grads)

    recompute = _check_checkpoints(checkpoints)
    if recompute:
        descs, grad_to_var, checkpoint_names = recompute_grad_descs(block, path, no_grad_grads, checkpoints, finish)
    else:
        descs, grad_to_var = [], {}
        for op in reversed(path):
            if op.has_attr("sub_block"):
                raise Unimplemented(f"append_backward: op {op.type!r} has a sub-block; control-flow backward is not supported")
            ds, g2v = make_grad_op_descs(op.type, op.inputs, op.outputs, op.all_attrs(), no_grad_grads)
            for d in ds:
                d["attrs"].setdefault(OP_DEVICE_ATTR, op.attr(OP_DEVICE_ATTR) if op.has_attr(OP_DEVICE_ATTR) else "")
            descs.extend(ds)
            grad_to_var.update(g2v)
        descs = finish(descs)

    start = len(block.ops)
    loss_desc = _loss_grad_desc(loss)
    for d in [loss_desc] + descs:
        attrs = dict(d["attrs"])
        if d is not loss_desc:
            attrs[OP_ROLE_ATTR] = OpRole.Backward
        attrs.setdefault(OP_ROLE_VAR_ATTR, [])
        attrs.setdefault("op_namescope", "")
        block._append_desc_op(d["type"], d["inputs"], d["outputs"], attrs)
    grad_info = _create_grad_vars(block, start, grad_to_var)

    if parameter_list is not None:
        params = [p if isinstance(p, str) else p.name for p in parameter_list]
    else:
        params = [p.name for p in program.global_block().all_parameters() if p.trainable]
    params_and_grads = []
    for p in params:
        if p not in grad_info:
            continue
        params_and_grads.append((program.global_block().var(p), block.vars.get(grad_info[p])))
    writers = last_writers(block.ops, {g.name for _, g in params_and_grads if g is not None})
    for p, g in params_and_grads:
        if g is None:
            continue
        if g.name in writers:
            g.op = block.ops[writers[g.name]]
        val = [p.name, g.name] + list(g.op.attr(OP_ROLE_VAR_ATTR) if g.op.has_attr(OP_ROLE_VAR_ATTR) else [])
        g.op._set_attr(OP_ROLE_VAR_ATTR, val)
    if recompute:
        # as Paddle's: with checkpoints, the pair (params_and_grads, sorted checkpoint names)
        return params_and_grads, checkpoint_names
    return params_and_grads


def _check_checkpoints(checkpoints):
    """Whether ``checkpoints`` asks for recompute: a non-empty list of Variables (as Paddle's test)."""
    if not isinstance(checkpoints, list) or not checkpoints:
        return False
    for c in checkpoints:
        if not isinstance(c, Variable):
            raise InvalidArgument(f"append_backward: checkpoints must be Variables, got {c!r} "
                                  f"({type(c).__name__})")
    return True


def _forward_name(grad_name):
    """``grad/grad/x@GRAD@RENAME@block0@1`` -> ``x`` (the ``grad/`` prefixes come from repeated
    ``static.gradients`` calls, as in Paddle's ``_strip_grad_suffix_``)."""
    name = strip_grad_suffix(grad_name)
    return name[name.rfind("grad/") + len("grad/"):] if "grad/" in name else name


def _create_grad_vars(block, start, grad_to_var):
    """Create every new grad var, shaped like its forward var; drop ops with no outputs.

    The vars join the block in name order, as Paddle's ``_sync_with_cpp`` adds them from the desc
    (which is what ``print(program)`` lists)."""
    grad_info, writer = {}, {}
    keep = block.ops[:start]
    for op in block.ops[start:]:
        outs = op.output_arg_names
        if not outs:
            continue
        keep.append(op)
        for n in outs:
            if n not in writer and block._find_var_recursive(n) is None:
                writer[n] = op
    for n in sorted(writer):
        fwd = block._find_var_recursive(_forward_name(n))
        v = block.create_var(name=n, shape=fwd.shape if fwd is not None else None,
                             dtype=fwd.dtype if fwd is not None else "float32")
        v.op = writer[n]
        if n in grad_to_var:
            grad_info[grad_to_var[n]] = n
    block.ops[:] = keep
    block.program._bump()
    return grad_info


from .gradients import gradients  # noqa: E402  (paddle.static.gradients lives in its own module)
