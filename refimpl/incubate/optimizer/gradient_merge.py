"""GradientMergeOptimizer: apply the update only every ``k_steps`` steps.

Mirrors ``paddle.incubate.optimizer.GradientMergeOptimizer`` (static mode):
a step counter ``gradient_merge_step`` (``increment``, ``elementwise_mod``
by ``gradient_merge_k``, ``equal`` to ``gradient_merge_zero`` ->
``gradient_merge_cond``), one persistable ``{param}@GRAD@GradientMerge``
accumulator per parameter (``elementwise_add`` of each new gradient), and a
``conditional_block`` that scales by 1/k when ``avg``, runs the inner
optimizer and zeroes the accumulators.
"""
from refimpl.core.errors import InvalidArgument
from refimpl.framework.op_role import OpRole, OP_ROLE_ATTR, OP_ROLE_VAR_ATTR
from refimpl.framework.program import default_main_program, default_startup_program, device_guard
from refimpl.static.control_flow import cond
from refimpl.static.input import create_global_var
from refimpl.tensor.math import increment

GRAD_MERGE_COND_NAME = "grad_merge_cond_name"


class GradientMergeOptimizer:
    def __init__(self, inner_optimizer, k_steps=1, avg=True):
        if not isinstance(k_steps, int) or k_steps <= 0:
            raise InvalidArgument(f"GradientMergeOptimizer: k_steps must be a positive int, got {k_steps!r}")
        self.inner_optimizer, self.k_steps, self.avg = inner_optimizer, k_steps, avg
        self._optimize_ops = None

    def backward(self, loss, startup_program=None, parameter_list=None, no_grad_set=None, callbacks=None):
        return self.inner_optimizer.backward(loss, startup_program, parameter_list, no_grad_set)

    def apply_optimize(self, loss, startup_program, params_grads):
        from refimpl.framework.program import program_guard
        with program_guard(loss.block.program, startup_program or default_startup_program()):
            return self.apply_gradients(params_grads)

    def minimize(self, loss, startup_program=None, parameter_list=None, no_grad_set=None):
        params_grads = self.backward(loss, startup_program, parameter_list, no_grad_set)
        return self.apply_optimize(loss, startup_program, params_grads), params_grads

    def _cond_var(self, block):
        k = create_global_var([1], self.k_steps, "int32", persistable=True, force_cpu=True, name="gradient_merge_k")
        zero = create_global_var([1], 0, "int32", persistable=True, force_cpu=True, name="gradient_merge_zero")
        step = create_global_var([1], 0, "int32", persistable=True, force_cpu=True, name="gradient_merge_step")
        c = block.create_var(name="gradient_merge_cond", shape=[1], dtype="bool")
        with device_guard("cpu"):
            increment(step, 1.0)
            block.append_op(type="elementwise_mod", inputs={"X": step, "Y": k}, outputs={"Out": step},
                            attrs={"axis": -1})
            block.append_op(type="equal", inputs={"X": step, "Y": zero}, outputs={"Out": c})
        return c

    def apply_gradients(self, params_grads):
        main, startup = default_main_program(), default_startup_program()
        block, sblock = main.global_block(), startup.global_block()
        c = self._cond_var(block)
        for _, g in params_grads:
            g.op._remove_attr(OP_ROLE_VAR_ATTR)
        merged = []
        for p, g in params_grads:
            name = p.name + "@GRAD@GradientMerge"
            gm = block.create_var(name=name, shape=p.shape, dtype=p.dtype, persistable=True)
            sgm = sblock.create_var(name=name, shape=p.shape, dtype=p.dtype, persistable=True)
            sblock.append_op(type="fill_constant", outputs={"Out": sgm},
                             attrs={"shape": list(p.shape), "dtype": _vt(p.dtype), "value": 0.0})
            op = block.append_op(type="elementwise_add", inputs={"X": g, "Y": gm}, outputs={"Out": gm},
                                 attrs={"axis": -1})
            op._set_attr(GRAD_MERGE_COND_NAME, c.name)
            op._set_attr(OP_ROLE_ATTR, OpRole.Backward)
            op._set_attr(OP_ROLE_VAR_ATTR, [p.name, gm.name])
            gm.op = op
            merged.append((p, gm))

        def true_apply():
            cur = main.current_block()
            if self.avg:
                for _, gm in merged:
                    op = cur.append_op(type="scale", inputs={"X": gm}, outputs={"Out": gm},
                                       attrs={"scale": 1.0 / self.k_steps, "bias": 0.0,
                                              "bias_after_scale": False})
                    op._set_attr(OP_ROLE_ATTR, OpRole.Backward)
            self._optimize_ops = self.inner_optimizer.apply_gradients(merged)
            for _, gm in merged:
                op = cur.append_op(type="fill_constant", inputs={}, outputs={"Out": gm},
                                   attrs={"shape": list(gm.shape), "dtype": _vt(gm.dtype), "value": 0.0,
                                          "str_value": "0.0", "force_cpu": False})
                op._set_attr(OP_ROLE_ATTR, OpRole.Optimize)

        cond(c, true_apply)
        return self._optimize_ops


def _vt(dtype):
    from refimpl.core.dtypes import to_vartype
    return to_vartype(dtype)
