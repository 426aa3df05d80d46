"""Gradient accumulation into persistable ``@GRAD@MERGE`` buffers.

Mirrors the core of Paddle's ``auto_parallel_gradient_merge_pass`` (the
"accumulate into a persistable buffer" form of the seed commit): for every
(parameter, gradient) pair a persistable ``{param}@GRAD@MERGE`` buffer is
created and zero-filled in the startup program; right after the op that
produces the gradient, ``merge = merge + grad`` is inserted with that op's
role; the optimizer ops read the buffer instead of the gradient, scaled by
1/k first when ``avg``; and the buffers are zeroed again after the update.

Pipelines need this: the backward job of each micro-batch adds its gradient
into the buffer, so no backward job has to keep variables alive for the
optimizer job (``set_skip_gc_vars`` refuses otherwise). Unlike Paddle's pass,
the update here happens on every run (k micro-batches per step); the
every-k-runs form is ``incubate.optimizer.GradientMergeOptimizer``.
"""
from refimpl.core.dtypes import to_vartype
from refimpl.core.errors import InvalidArgument
from refimpl.framework.op_role import OP_ROLE_ATTR, OP_ROLE_VAR_ATTR, OpRole

MERGE_SUFFIX = "@GRAD@MERGE"


def params_grads_of(program):
    """(param name, grad name) for every optimizer op that carries ``op_role_var``."""
    pairs = []
    for op in program.global_block().ops:
        if op.role() & OpRole.Optimize and op.has_attr(OP_ROLE_VAR_ATTR):
            rv = op.attr(OP_ROLE_VAR_ATTR)
            for i in range(0, len(rv) - 1, 2):
                if (rv[i], rv[i + 1]) not in pairs:
                    pairs.append((rv[i], rv[i + 1]))
    return pairs


def create_merge_buffer(block, startup_block, param_name):
    """The persistable ``{param}@GRAD@MERGE`` var of ``block``, zero-filled by ``startup_block``."""
    p = block.var(param_name)
    name = param_name + MERGE_SUFFIX
    merge = block.create_var(name=name, shape=p.shape, dtype=p.dtype, persistable=True)
    smerge = startup_block.create_var(name=name, shape=p.shape, dtype=p.dtype, persistable=True)
    startup_block.append_op(type="fill_constant", outputs={"Out": smerge},
                            attrs={"shape": list(p.shape), "dtype": to_vartype(p.dtype), "value": 0.0})
    return merge


def _last_writer(block, name):
    for i in range(len(block.ops) - 1, -1, -1):
        if name in block.ops[i].output_arg_names and not block.ops[i].role() & OpRole.Optimize:
            return i
    raise InvalidArgument(f"gradient accumulation: no op produces the gradient {name!r}")


def accumulate_gradients(main, startup, k_steps, avg=True, params_grads=None):
    """Rewrite ``main``/``startup`` in place; return [(param, merge buffer name)]."""
    if not isinstance(k_steps, int) or k_steps < 1:
        raise InvalidArgument(f"gradient accumulation: k_steps must be a positive int, got {k_steps!r}")
    block, sblock = main.global_block(), startup.global_block()
    pairs = params_grads or params_grads_of(main)
    if not pairs:
        raise InvalidArgument("gradient accumulation: the program has no optimizer ops with op_role_var")
    merged = []
    for p_name, g_name in pairs:
        merge = create_merge_buffer(block, sblock, p_name)
        merge_name = merge.name
        at = _last_writer(block, g_name) + 1
        block._insert_op(at, type="elementwise_add", inputs={"X": [g_name], "Y": [merge]},
                         outputs={"Out": [merge]},
                         attrs={"axis": -1, OP_ROLE_ATTR: block.ops[at - 1].role(),
                                OP_ROLE_VAR_ATTR: [p_name, merge_name]})
        merged.append((p_name, g_name, merge_name))
    first_opt = min(i for i, op in enumerate(block.ops) if op.role() & OpRole.Optimize)
    for _, g_name, merge_name in merged:
        for op in block.ops[first_opt:]:
            if op.role() & OpRole.Optimize and g_name in op.input_arg_names:
                op._rename_input(g_name, merge_name)
                if op.has_attr(OP_ROLE_VAR_ATTR):
                    op._set_attr(OP_ROLE_VAR_ATTR, [merge_name if n == g_name else n
                                                    for n in op.attr(OP_ROLE_VAR_ATTR)])
    if avg and k_steps > 1:
        for j, (_, _, merge_name) in enumerate(merged):
            block._insert_op(first_opt + j, type="scale", inputs={"X": [merge_name]},
                             outputs={"Out": [merge_name]},
                             attrs={"scale": 1.0 / k_steps, "bias": 0.0, "bias_after_scale": False,
                                    OP_ROLE_ATTR: OpRole.Optimize})
    for p_name, _, merge_name in merged:
        p = block.var(p_name)
        block.append_op(type="fill_constant", inputs={}, outputs={"Out": [merge_name]},
                        attrs={"shape": list(p.shape), "dtype": to_vartype(p.dtype), "value": 0.0,
                               OP_ROLE_ATTR: OpRole.Optimize})
    return [(p, m) for p, _, m in merged]
