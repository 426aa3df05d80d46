"""LocalSGD and adaptive LocalSGD: ranks train alone and average their parameters every k steps.

Mirrors ``paddle/distributed/fleet/meta_optimizers/localsgd_optimizer.py``
of Paddle 3.3.1 (``LocalSGDOptimizer``, ``AdaptiveLocalSGDOptimizer``).
``minimize`` runs the inner SGD / Momentum, then

* startup: two rings brought up (``c_gen_nccl_id``, ``c_comm_init`` and a
  barrier each), every parameter broadcast from rank 0 on the rings in turn,
  a ``<param>@SNAPSHOT`` copy of each parameter, the step counter
  ``@STEP_COUNTER@`` and the int64 globals ``k_steps``, ``begin_step``,
  ``last_step`` (adaptive: also ``avg_loss``, ``lr_0``, ``loss_0``);
* main: after the update, ``cond(step > begin_step, begin_localsgd,
  communicate)`` where ``begin_localsgd`` is ``cond(step - last_step ==
  k_steps, communicate)``, and ``communicate`` turns each parameter into
  its change since the snapshot, ``all_reduce``-sums it (rings 0, 1, 0, ...),
  scales it by ``1/nranks``, applies the mean change to the snapshot and
  copies it back (``elementwise_sub``, ``all_reduce``, ``scale``,
  ``elementwise_sub``, ``assign``), then sets ``last_step = step``.
* adaptive: at step 1 the mean loss and the learning rate are saved
  (``loss_0``, ``lr_0``); after every averaging
  ``k_steps = clip(ceil(sqrt(lr_0 * avg_loss / (lr * loss_0) * init_k_steps)), 1, 16)``.
  As in Paddle the ``all_reduce`` of the loss is appended to the global
  block even when its caller builds a branch, so it runs at every step.

Paddle 3.3.1's legacy IR cannot build these programs (``static.nn.cond``
with a false branch calls ``logical_not`` with no legacy-IR path, and the
adaptive formula's ``sqrt`` / ``minimum`` likewise); the op lists this
module writes are those 3.3.1 gives with those calls appended as their
Paddle 2.6.2 legacy ops (``logical_not``, ``sqrt``, ``ceil``,
``elementwise_min`` / ``elementwise_max``). The parameter averaging uses
3.3.1's ``all_reduce`` (2.6.2 writes ``c_allreduce_sum``).
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Set, Tuple, TYPE_CHECKING

from refimpl.core.errors import InvalidArgument
from refimpl.core.reduce_op import ReduceOp
from refimpl.framework.op_role import OP_ROLE_ATTR, OpRole
from refimpl.framework.program import default_main_program, default_startup_program, program_guard

from .common import CollectiveHelper
from .meta_optimizer_base import MetaOptimizerBase

if TYPE_CHECKING:
    from refimpl.framework.block import Block
    from refimpl.framework.operator import Operator
    from refimpl.framework.program import Program
    from refimpl.framework.variable import Parameter, Variable
    from refimpl.optimizer import Optimizer

SNAPSHOT_KEY = "@SNAPSHOT"
NRINGS = 2
MAX_LOCAL_STEPS, MIN_LOCAL_STEPS = 16, 1  # the bounds of the adaptive k


class _LocalSGDBase(MetaOptimizerBase):
    """What both LocalSGD optimizers share: the snapshots, the rings and the averaging body."""

    strategy_name = ""  # the DistributedStrategy switch: "localsgd" or "adaptive_localsgd"

    def __init__(self, optimizer: Optimizer) -> None:
        super().__init__(optimizer)
        self.meta_optimizers_white_list = ["AMPOptimizer"]
        self.snapshot_key = SNAPSHOT_KEY
        self.nrings = NRINGS

    def _can_apply(self) -> bool:
        from refimpl.optimizer import SGD, Momentum
        if not self.role_maker._is_collective or not getattr(self.user_defined_strategy, self.strategy_name):
            return False
        if self.role_maker._worker_num() <= 1:
            return False
        return isinstance(self.inner_opt, (Momentum, SGD))

    def snapshot_name(self, param_name: str) -> str:
        return param_name + self.snapshot_key

    def create_snapshot_vars(self, program: Program) -> List[Tuple[Parameter, Variable]]:
        """A persistable ``<param>@SNAPSHOT`` beside every non-distributed parameter of ``program``."""
        block = program.global_block()
        return [(p, block.create_var(name=self.snapshot_name(p.name), shape=p.shape, persistable=True,
                                     stop_gradient=True, dtype=p.dtype))
                for p in list(block.iter_parameters()) if not getattr(p, "is_distributed", False)]

    def init_snapshot_vars(self, startup_program: Program, param2snapshot: Sequence[Tuple[Any, Any]]) -> None:
        from refimpl.tensor.creation import assign
        with program_guard(startup_program):
            for param, snapshot in param2snapshot:
                assign(param, snapshot)

    def _prepare(self, loss: Variable, startup_program: Optional[Program]) -> Tuple[Any, Program, list]:
        """The inner minimize, then the startup's rings and snapshots; returns (minimized, startup, p2s)."""
        minimized = self.inner_opt.minimize(loss, startup_program=startup_program)
        startup = startup_program if startup_program is not None else default_startup_program()
        p2s = self.create_snapshot_vars(loss.block.program)
        if not p2s:
            raise InvalidArgument(f"{type(self).__name__}: the program of loss {loss.name!r} has no "
                                  f"(non-distributed) parameter to average")
        CollectiveHelper(self.role_maker, self.nrings).update_startup_program(startup)
        self.init_snapshot_vars(startup, self.create_snapshot_vars(startup))
        return minimized, startup, p2s

    def _communicate(self, p2s: Sequence[Tuple[Any, Any]], step: Variable, last_step: Variable) -> None:
        """Average the parameters' changes since their snapshots over all ranks (Paddle's ``communicate``)."""
        from refimpl.tensor.creation import assign
        block = default_main_program().current_block()
        role = {OP_ROLE_ATTR: OpRole.Optimize}
        ring_id, param = -1, None
        for param, snapshot in p2s:
            block.append_op(type="elementwise_sub", inputs={"X": [snapshot], "Y": [param]},
                            outputs={"Out": [param]}, attrs=dict(role))
            block.append_op(type="c_sync_calc_stream", inputs={"X": param}, outputs={"Out": param},
                            attrs=dict(role))
            ring_id = (ring_id + 1) % self.nrings
            block.append_op(type="all_reduce", inputs={"x": [param]}, outputs={"out": [param]},
                            attrs={"ring_id": ring_id, "reduce_type": ReduceOp.SUM, **role})
        for ring in range(self.nrings):
            block.append_op(type="c_sync_comm_stream", inputs={"X": param}, outputs={"Out": param},
                            attrs={"ring_id": ring, **role})
        for param, snapshot in p2s:
            block.append_op(type="scale", inputs={"X": [param]}, outputs={"Out": [param]},
                            attrs={"scale": 1.0 / self.role_maker._worker_num(), **role})
            block.append_op(type="elementwise_sub", inputs={"X": [snapshot], "Y": [param]},
                            outputs={"Out": [param]}, attrs=dict(role))
            block.append_op(type="assign", inputs={"X": [param]}, outputs={"Out": [snapshot]}, attrs=dict(role))
        assign(step, last_step)

    def _int_global(self, name: str, value: int) -> Variable:
        from refimpl.static.input import create_global_var
        return create_global_var(name=name, shape=[1], value=int(value), dtype="int64", persistable=True)


class LocalSGDOptimizer(_LocalSGDBase):
    """Average the parameters every ``localsgd_configs['k_steps']`` steps after ``begin_step``."""

    strategy_name = "localsgd"

    def __init__(self, optimizer: Optimizer) -> None:
        super().__init__(optimizer)
        self.meta_optimizers_black_list = ["AdaptiveLocalSGDOptimizer"]

    def _disable_strategy(self, dist_strategy: Any) -> None:
        dist_strategy.localsgd = False
        dist_strategy.localsgd_configs = {}

    def _enable_strategy(self, dist_strategy: Any, context: Optional[dict] = None) -> None:
        dist_strategy.localsgd = True
        dist_strategy.localsgd_configs = {"k_steps": 1, "begin_step": 1}

    def minimize_impl(self, loss: Variable, startup_program: Optional[Program] = None,
                      parameter_list: Optional[Sequence[Any]] = None,
                      no_grad_set: Optional[Set[Any]] = None) -> Tuple[List[Operator], Any]:
        from refimpl.optimizer.lr import autoincreased_step_counter
        from refimpl.static.control_flow import cond
        configs = self.user_defined_strategy.localsgd_configs
        minimized, startup, p2s = self._prepare(loss, startup_program)
        with program_guard(loss.block.program, startup):
            step: Any = autoincreased_step_counter(begin=1)  # Any: Variable's operators are patched in
            k_steps = self._int_global("k_steps", configs["k_steps"])
            begin_step = self._int_global("begin_step", configs["begin_step"])
            last_step = self._int_global("last_step", configs["begin_step"])

            def communicate() -> None:
                self._communicate(p2s, step, last_step)

            def begin_localsgd() -> None:
                cond(_equal(step - last_step, k_steps), communicate)

            cond(step > begin_step, begin_localsgd, communicate)
        return minimized


class AdaptiveLocalSGDOptimizer(_LocalSGDBase):
    """LocalSGD whose k follows the loss: ``adaptive_localsgd_configs`` ``init_k_steps`` / ``begin_step``."""

    strategy_name = "adaptive_localsgd"

    def __init__(self, optimizer: Optimizer) -> None:
        super().__init__(optimizer)
        self.meta_optimizers_black_list = ["LocalSGDOptimizer"]

    def _disable_strategy(self, dist_strategy: Any) -> None:
        dist_strategy.adaptive_localsgd = False
        dist_strategy.adaptive_localsgd_configs = {}

    def _enable_strategy(self, dist_strategy: Any, context: Optional[dict] = None) -> None:
        dist_strategy.adaptive_localsgd = True
        dist_strategy.adaptive_localsgd_configs = {"init_k_steps": 1, "begin_step": 1}

    def _generate_avg_loss(self, program_block: Block, loss: Variable, avg_loss: Variable) -> None:
        """``avg_loss`` := the mean of ``loss`` over the ranks (all_reduce, sync, scale)."""
        role = {OP_ROLE_ATTR: OpRole.Optimize}
        program_block.append_op(type="all_reduce", inputs={"x": [loss]}, outputs={"out": [avg_loss]},
                                attrs={"ring_id": 0, "reduce_type": ReduceOp.SUM, **role})
        program_block.append_op(type="c_sync_calc_stream", inputs={"X": [avg_loss]}, outputs={"Out": [avg_loss]},
                                attrs=dict(role))
        program_block.append_op(type="scale", inputs={"X": [avg_loss]}, outputs={"Out": [avg_loss]},
                                attrs={"scale": 1.0 / self.role_maker._worker_num(), **role})

    def minimize_impl(self, loss: Variable, startup_program: Optional[Program] = None,
                      parameter_list: Optional[Sequence[Any]] = None,
                      no_grad_set: Optional[Set[Any]] = None) -> Tuple[List[Operator], Any]:
        from refimpl.optimizer.lr import autoincreased_step_counter
        from refimpl.static.control_flow import cond
        from refimpl.static.input import create_global_var
        from refimpl.tensor.creation import assign
        configs = self.user_defined_strategy.adaptive_localsgd_configs
        init_k_steps = int(configs["init_k_steps"])
        minimized, startup, p2s = self._prepare(loss, startup_program)
        main_block = loss.block
        with program_guard(main_block.program, startup):
            step: Any = autoincreased_step_counter(begin=1)  # Any: Variable's operators are patched in
            k_steps = self._int_global("k_steps", init_k_steps)
            begin_step = self._int_global("begin_step", int(configs["begin_step"]))
            last_step = self._int_global("last_step", 0)
            avg_loss = create_global_var(name="avg_loss", shape=[1], value=0.0, dtype=loss.dtype, persistable=True)
            lr_0 = create_global_var(name="lr_0", shape=[1], value=0.0, dtype="float32", persistable=True)
            loss_0 = create_global_var(name="loss_0", shape=[1], value=0.0, dtype="float32", persistable=True)
            global_lr = self.inner_opt._global_learning_rate()

            def initialize() -> None:
                self._generate_avg_loss(main_block, loss, avg_loss)
                assign(avg_loss, loss_0)
                assign(global_lr, lr_0)

            cond(_equal(step, 1), initialize)

            def communicate() -> None:
                self._communicate(p2s, step, last_step)

            def communicate_avg_loss() -> None:
                communicate()
                self._generate_avg_loss(main_block, loss, avg_loss)
                assign(_next_local_steps(lr_0, avg_loss, global_lr, loss_0, init_k_steps), k_steps)

            def begin_localsgd() -> None:
                cond(_equal(step - last_step, k_steps), communicate_avg_loss)

            cond(step > begin_step, begin_localsgd, communicate)
        return minimized


def _next_local_steps(lr_0: Any, avg_loss: Any, global_lr: Any, loss_0: Any, init_k_steps: int) -> Variable:
    """``clip(int64(ceil(sqrt(lr_0 * avg_loss / (lr * loss_0) * init_k_steps))), 1, 16)``."""
    from refimpl.tensor.creation import full
    from refimpl.tensor.manipulation import cast
    from refimpl.tensor.math import ceil, maximum, minimum, sqrt
    ratio = lr_0 * avg_loss / (global_lr * loss_0) * float(init_k_steps)
    steps = cast(ceil(sqrt(ratio)), dtype="int64")
    most = full(shape=[1], dtype="int64", fill_value=MAX_LOCAL_STEPS)
    least = full(shape=[1], dtype="int64", fill_value=MIN_LOCAL_STEPS)
    return maximum(minimum(steps, most), least)


def _equal(x: Variable, y: Any) -> Variable:
    """``x == y`` as Paddle's legacy math-op patch writes it (refimpl keeps ``==`` for identity):
    an ``equal`` op into ``tmp_k``, a number first becoming a 0-D ``fill_constant`` ``tmp_k``."""
    from refimpl.tensor.math import constant_like, new_tmp
    if not hasattr(y, "block"):
        y = constant_like(x, y, [])
    out = new_tmp(x, "bool")
    out.stop_gradient = True
    x.block.program.current_block().append_op(type="equal", inputs={"X": [x], "Y": [y]}, outputs={"Out": [out]})
    return out


__all__ = ["LocalSGDOptimizer", "AdaptiveLocalSGDOptimizer"]
