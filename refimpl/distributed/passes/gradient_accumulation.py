"""Gradient accumulation into persistable ``@GRAD@MERGE`` buffers.

Mirrors the core of Paddle's ``auto_parallel_gradient_merge_pass`` (the
"accumulate into a persistable buffer" form of
``python/paddle/distributed/passes/auto_parallel_gradient_merge.py`` as of
Paddle PR #66641): for every (parameter, gradient) pair a persistable
``{param}@GRAD@MERGE`` buffer is created and zero-filled in the startup program; right after the op that
produces the gradient, ``merge = merge + grad`` is inserted with that op's
role; the optimizer ops read the buffer instead of the gradient, scaled by
1/k first when ``avg``; and the buffers are zeroed again after the update.

Pipelines need this: the backward job of each micro-batch adds its gradient
into the buffer, so no backward job has to keep variables alive for the
optimizer job (``set_skip_gc_vars`` refuses otherwise). Unlike Paddle's pass,
the update here happens on every run (k micro-batches per step); the
every-k-runs form is ``incubate.optimizer.GradientMergeOptimizer``.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, TYPE_CHECKING, Tuple

from refimpl.core.dtypes import to_vartype
from refimpl.core.errors import InvalidArgument
from refimpl.core.gc_pause import paused_cyclic_gc
from refimpl.framework.block import last_writers
from refimpl.framework.op_role import OP_ROLE_ATTR, OP_ROLE_VAR_ATTR, OpRole
from refimpl.ops.registry import GRAD_SUFFIX

if TYPE_CHECKING:
    from refimpl.framework.block import Block
    from refimpl.framework.program import Program
    from refimpl.framework.variable import Variable

MERGE_SUFFIX = "@GRAD@MERGE"


def params_grads_of(program: Program) -> List[Tuple[str, str]]:
    """(param name, grad name) for every optimizer op that carries ``op_role_var`` as such pairs.

    Ops whose ``op_role_var`` lists gradients only (AMP's ``check_finite_and_unscale``, written under
    ``_optimized_guard(grads)``) are not read as pairs: a pair starts with a parameter.
    """
    pairs = {}  # insertion-ordered set
    block = program.global_block()
    for op in block.ops:
        if op.role() & OpRole.Optimize and op.has_attr(OP_ROLE_VAR_ATTR):
            rv = op.attr(OP_ROLE_VAR_ATTR)
            for i in range(0, len(rv) - 1, 2):
                var = block.vars.get(rv[i])
                if var is not None and var.is_parameter:
                    pairs.setdefault((rv[i], rv[i + 1]))
    return list(pairs)


def create_merge_buffer(block: Block, startup_block: Block, param_name: str) -> Variable:
    """The persistable ``{param}@GRAD@MERGE`` var of ``block``, zero-filled by ``startup_block``."""
    p = block.var(param_name)
    name = param_name + MERGE_SUFFIX
    merge = block.create_var(name=name, shape=p.shape, dtype=p.dtype, persistable=True)
    smerge = startup_block.create_var(name=name, shape=p.shape, dtype=p.dtype, persistable=True)
    startup_block.append_op(type="fill_constant", outputs={"Out": smerge},
                            attrs={"shape": list(p.shape), "dtype": to_vartype(p.dtype), "value": 0.0})
    return merge


@paused_cyclic_gc
def accumulate_gradients(main: Program, startup: Program, k_steps: int, avg: bool = True,
                         params_grads: Optional[Sequence[Tuple[str, str]]] = None) -> List[Tuple[str, str]]:
    """Rewrite ``main``/``startup`` in place; return [(param, merge buffer name)].

    Every step is one pass over the block (the ``elementwise_add`` and
    ``scale`` ops are built first and spliced in together), so the cost is
    linear in the program size.
    """
    if not isinstance(k_steps, int) or k_steps < 1:
        raise InvalidArgument(f"gradient accumulation: k_steps must be a positive int, got {k_steps!r}")
    block, sblock = main.global_block(), startup.global_block()
    pairs = params_grads or params_grads_of(main)
    if not pairs:
        raise InvalidArgument("gradient accumulation: the program has no optimizer ops with op_role_var")
    _grad_casts_to_backward(block, {g for _, g in pairs})
    writers = last_writers(block.ops, {g for _, g in pairs}, skip=lambda op: bool(op.role() & OpRole.Optimize))
    merged, adds = [], {}
    for p_name, g_name in pairs:
        merge = create_merge_buffer(block, sblock, p_name)
        merge_name = merge.name
        if g_name not in writers:
            raise InvalidArgument(f"gradient accumulation: no op produces the gradient {g_name!r}")
        at = writers[g_name]
        # each add goes right after its gradient's op: of several for one op, the last pair's is first
        adds.setdefault(at + 1, []).insert(0, block._make_op(
            "elementwise_add", inputs={"X": [g_name], "Y": [merge]}, outputs={"Out": [merge]},
            attrs={"axis": -1, OP_ROLE_ATTR: block.ops[at].role(), OP_ROLE_VAR_ATTR: [p_name, merge_name]}))
        merged.append((p_name, g_name, merge_name))
    block._insert_ops(adds)
    first_opt = min(i for i, op in enumerate(block.ops) if op.role() & OpRole.Optimize)
    _read_merge_buffers(block.ops[first_opt:], {g: m for _, g, m in merged})
    if avg and k_steps > 1:
        scales = [block._make_op("scale", inputs={"X": [merge_name]}, outputs={"Out": [merge_name]},
                                attrs={"scale": 1.0 / k_steps, "bias": 0.0, "bias_after_scale": False,
                                       OP_ROLE_ATTR: OpRole.Optimize})
                  for _, _, merge_name in merged]
        block._insert_ops({first_opt: scales})
    for p_name, _, merge_name in merged:
        p = block.var(p_name)
        block.append_op(type="fill_constant", inputs={}, outputs={"Out": [merge_name]},
                        attrs={"shape": list(p.shape), "dtype": to_vartype(p.dtype), "value": 0.0,
                               OP_ROLE_ATTR: OpRole.Optimize})
    return [(p, m) for p, _, m in merged]


def _grad_casts_to_backward(block, grads):
    """Optimizer-role ``cast`` ops that make one of ``grads`` from another gradient become Backward ops.

    AMP's ``update_role_var_grad`` gives the float32 cast of a float16
    gradient role Optimize; accumulation needs it once per micro-batch.
    """
    for op in block.ops:
        if op.type == "cast" and op.role() & OpRole.Optimize and op.output("Out")[0] in grads \
                and GRAD_SUFFIX in op.input("X")[0]:
            op._set_attr(OP_ROLE_ATTR, int(OpRole.Backward))


def _read_merge_buffers(ops, merge_of):
    """Optimizer ops read each gradient's merge buffer instead of the gradient (``op_role_var`` too);
    those that update a gradient in place (AMP's unscale) write the buffer."""
    for op in ops:
        if not op.role() & OpRole.Optimize:
            continue
        for g_name in dict.fromkeys(n for n in op.output_arg_names if n in merge_of):
            op._rename_output(g_name, merge_of[g_name])
        for g_name in dict.fromkeys(n for n in op.input_arg_names if n in merge_of):
            merge_name = merge_of[g_name]
            op._rename_input(g_name, merge_name)
            if op.has_attr(OP_ROLE_VAR_ATTR):
                op._set_attr(OP_ROLE_VAR_ATTR, [merge_name if n == g_name else n
                                                for n in op.attr(OP_ROLE_VAR_ATTR)])
