"""``DistributedOptimizer``: what ``fleet.distributed_optimizer`` returns; its ``minimize`` is fleet's.

Mirrors ``Fleet._minimize_impl`` of ``paddle/distributed/fleet/fleet.py``
(Paddle 3.3.1, static graph): every meta-optimizer class of
``MetaOptimizerFactory`` is made over the user's optimizer, told the loss,
role maker and a copy of the strategy (``_set_basic_info``; in strict auto
mode each first turns its switch on with ``_enable_strategy``), and asked
``_can_apply()``. The ``StrategyCompiler`` picks the longest chain of the
applicable ones (white lists) and returns its head; the valid strategy is
the copy with every meta-optimizer not in the chain disabled
(``_disable_strategy``) — what ``_final_strategy()`` reports, with
``_get_applied_meta_list()`` / ``_get_applied_graph_list()``. The head's
``minimize`` then builds the program (with no head, the user's optimizer's).
The results are also put in the fleet's context, as Paddle does.

Differences:

* refimpl returns this object from ``fleet.distributed_optimizer``
  (Paddle returns the fleet itself); made directly with no fleet it runs on
  the ranks of ``paddle.distributed`` (a collective role of that world);
* before anything is built, every meta-optimizer of the chain checks its
  configs (``_check_configs``: AMP lists naming unknown ops, a loss scale
  <= 0, checkpoints that are no variable, switches refimpl does not
  implement) and raises a typed error naming the option and the value —
  the same on every rank, since it depends only on the program and the
  strategy; switches no meta-optimizer covers that refimpl lacks (auto,
  hybrid mp degree ...) raise Unimplemented too;
* ``_minimize_impl``'s build-strategy passes over the program
  (``apply_ir_passes``) and the ``_fleet_opt`` trainer info are not applied.
"""
from __future__ import annotations

import copy
from typing import Any, List, Optional, Sequence, Set, TYPE_CHECKING, Tuple

from refimpl.core.errors import InvalidArgument, PreconditionNotMet, Unimplemented
from refimpl.distributed import collective
from refimpl.ops.model_parallel_ops import TENSOR_PARALLEL_OPS

from ..base.meta_optimizer_factory import MetaOptimizerFactory
from ..base.runtime_factory import RuntimeFactory
from ..base.strategy_compiler import StrategyCompiler

if TYPE_CHECKING:
    from refimpl.distributed.fleet.base.distributed_strategy import DistributedStrategy
    from refimpl.distributed.fleet.fleet import Fleet
    from refimpl.framework.operator import Operator
    from refimpl.framework.program import Program
    from refimpl.framework.variable import Parameter, Variable
    from refimpl.optimizer.optimizer import Optimizer

# switches with no meta-optimizer of their own, which refimpl does not implement either
#: the meta-optimizers that set up the model-parallel ring 0 of the tensor-parallel ops
_MODEL_PARALLEL_OWNERS = ("TensorParallelOptimizer", "PipelineOptimizer", "ShardingOptimizer")
_NOT_COVERED = ("auto", "semi_auto", "auto_search", "elastic", "heter_ccl_mode", "is_fl_ps_mode",
                "sync_batch_norm", "use_hierarchical_allreduce", "fuse_grad_merge", "adam_d2sum")


class _WorldRoleMaker:
    """A collective role on the ranks of ``paddle.distributed`` (a DistributedOptimizer made without fleet).

    Its endpoints are made up (``127.0.0.1:6170 + rank``): they only fill the attrs of the startup
    ops, whose refimpl kernels do not connect to them.
    """

    _is_collective = True

    def _worker_index(self) -> int:
        return collective.get_rank()

    def _worker_num(self) -> int:
        return collective.get_world_size()

    def _get_trainer_endpoints(self) -> List[str]:
        return [f"127.0.0.1:{6170 + r}" for r in range(self._worker_num())]

    def _is_non_distributed(self) -> bool:
        return False


class DistributedOptimizer:
    """What ``fleet.distributed_optimizer(opt, strategy)`` returns."""

    def __init__(self, inner_optimizer: Optimizer, strategy: Optional[DistributedStrategy] = None,
                 fleet: Optional[Fleet] = None) -> None:
        from refimpl.distributed.fleet.base.distributed_strategy import DistributedStrategy
        if strategy is not None and not isinstance(strategy, DistributedStrategy):
            raise InvalidArgument(f"distributed_optimizer: strategy must be a DistributedStrategy, "
                                  f"got {type(strategy).__name__}")
        if not callable(getattr(inner_optimizer, "minimize", None)):
            # Paddle 3.3.1 fails at minimize with a bare AttributeError ('NoneType' ... '_learning_rate')
            raise InvalidArgument(f"distributed_optimizer: optimizer must be a paddle optimizer (with "
                                  f"minimize), got {inner_optimizer!r}")
        self.inner_opt = inner_optimizer
        self.user_defined_strategy = strategy if strategy is not None else DistributedStrategy()
        self.fleet = fleet
        self.strategy_compiler = StrategyCompiler()
        self.meta_optimizer: Any = None
        self._final: Optional[DistributedStrategy] = None

    @property
    def applied_strategy(self) -> Optional[DistributedStrategy]:
        """The strategy ``minimize`` applied (None before it): ``_final_strategy()`` without the error."""
        return self._final

    def _role_maker(self) -> Any:
        return self.fleet.role_maker if self.fleet is not None else _WorldRoleMaker()

    # ---- Paddle's _minimize_impl, up to the choice of the chain -----------------------------
    def _compile(self, loss: Variable) -> Tuple[Any, List[Any], Any]:
        """(head of the chain or None, the chain, the valid strategy); nothing is built yet."""
        rm = self._role_maker()
        strategy = copy.deepcopy(self.user_defined_strategy)
        candidates = MetaOptimizerFactory()._get_valid_meta_optimizers(self.inner_opt)
        if strategy._is_strict_auto():
            for opt in candidates:
                opt._enable_strategy(strategy, {})
        valid, graph, cannot = [], [], []
        for opt in candidates:
            opt._set_basic_info(loss, rm, self.inner_opt, strategy)
            if isinstance(opt, PipelineOptimizer):
                opt.fleet = self.fleet
            if opt._can_apply():
                (graph if opt._is_graph_out() else valid).append(opt)
            else:
                cannot.append(opt)
        head, _ = self.strategy_compiler.generate_optimizer(loss, rm, self.inner_opt, strategy, valid, graph)
        chain = self.strategy_compiler._get_applied_meta_optimizer()
        return (head if chain else None), chain, self.strategy_compiler._get_valid_strategy(strategy, cannot)

    def _check(self, loss: Variable, chain: Sequence[Any]) -> None:
        s = self.user_defined_strategy
        for opt in chain:
            opt._check_configs(loss)
        if not isinstance(chain[0] if chain else None, ParameterServerOptimizer):
            covered = {n for opt in chain for n in getattr(opt, "covered_switches", tuple)()}
            missing = [n for n in _NOT_COVERED if getattr(s, n) is True and n not in covered]
            missing += [f"hybrid_configs.{k}" for k in ("sep_degree", "cp_degree",
                                                        "ep_degree", "moe_sharding_degree")
                        if s.hybrid_configs[k] > 1]
            if missing:
                raise Unimplemented(f"DistributedStrategy.{missing[0]} is set, but refimpl does not implement it "
                                    f"(all such switches set: {missing})")
        self._check_model_parallel_chain(loss, chain)

    @staticmethod
    def _check_model_parallel_chain(loss: Variable, chain: Sequence[Any]) -> None:
        """Tensor-parallel ops need a meta-optimizer that brings up their model-parallel ring 0.

        Without one (``tensor_parallel`` off, or dropped by the strategy compiler, e.g. under
        gradient merge) ring 0 would be the whole world and the shards would train on wrong sums;
        Paddle's program fails at run time there (ring 0 never initialized), refimpl refuses it here.
        """
        names = [type(o).__name__ for o in chain]
        if any(n in _MODEL_PARALLEL_OWNERS for n in names):
            return
        ops = sorted({op.type for op in loss.block.program.global_block().ops if op.type in TENSOR_PARALLEL_OPS})
        if ops:
            raise PreconditionNotMet(f"the program holds tensor-parallel ops {ops}, but the applied meta-optimizers "
                                     f"{names} bring up no model-parallel ring: set strategy.tensor_parallel "
                                     f"(tensor_parallel_configs) or sharding_configs['mp_degree'] / a pipeline, "
                                     f"and no strategy that makes the compiler drop them")

    # ---- minimize ---------------------------------------------------------------------------
    def minimize(self, loss: Variable, startup_program: Optional[Program] = None,
                 parameter_list: Optional[Sequence[Any]] = None,
                 no_grad_set: Optional[Set[Any]] = None
                 ) -> Tuple[List[Operator], List[Tuple[Parameter, Variable]]]:
        """Backward and update of the inner optimizer, rewritten by the chosen meta-optimizers."""
        if self.fleet is not None and self.fleet.role_maker is None:
            from refimpl.distributed.fleet.fleet import NotInitialized
            raise NotInitialized("DistributedOptimizer.minimize: fleet is not initialized on this rank: call "
                                 "fleet.init(...) before minimize")
        head, chain, valid = self._compile(loss)
        self._check(loss, chain)
        self.meta_optimizer = head
        self._final = valid
        rm = self._role_maker()
        if self.fleet is not None and not self.fleet.is_collective and rm._is_non_distributed():
            head = None  # Paddle: a lone non-collective process minimizes with the user's optimizer
        if head is None:
            optimize_ops, params_grads = self.inner_opt.minimize(loss, startup_program, parameter_list,
                                                                 no_grad_set)
        else:
            optimize_ops, params_grads = head.minimize(loss, startup_program, parameter_list, no_grad_set)
        self._record(loss, valid, getattr(head, "ps_job", None))
        return optimize_ops, params_grads

    def _record(self, loss: Variable, valid: Any, ps_job: Any) -> None:
        """Paddle's fleet context and runtime handle."""
        if self.fleet is None:
            return
        context = {"user_defined_strategy": copy.deepcopy(self.user_defined_strategy), "loss": loss,
                   "origin_main_program": loss.block.program, "role_maker": self.fleet.role_maker,
                   "valid_strategy": valid, "applied_meta_list": self._get_applied_meta_list(),
                   "applied_graph_list": self._get_applied_graph_list()}
        self.fleet.record_minimized(RuntimeFactory()._create_runtime(context), ps_job, context)

    def _get_applied_meta_list(self) -> List[str]:
        return self.strategy_compiler._get_applied_meta_list()

    def _get_applied_graph_list(self) -> List[str]:
        return self.strategy_compiler._get_applied_graph_list()

    def _final_strategy(self) -> DistributedStrategy:
        if self._final is None:
            raise InvalidArgument("_final_strategy: call minimize first")
        return self._final

    def _get_amp_optimizer(self) -> Any:
        """As Paddle's ``Fleet._get_amp_optimizer``: the first applied meta-optimizer with ``amp_init``,
        else the user's optimizer when it is itself AMP-decorated (``static.amp.decorate``)."""
        applied = self.strategy_compiler._get_applied_meta_optimizer() if self._final is not None else []
        amp = next((o for o in applied if hasattr(o, "amp_init")), None)
        if amp is None and hasattr(self.inner_opt, "amp_init"):
            amp = self.inner_opt
        if amp is None:
            raise InvalidArgument("amp_init / get_loss_scaling: AMP is not applied (set strategy.amp, or pass a "
                                  "static.amp.decorate'd optimizer, and call minimize first)")
        return amp

    def amp_init(self, place: Any, scope: Any = None, test_program: Any = None, use_fp16_test: bool = False) -> Any:
        """Paddle's ``fleet.amp_init``: the AMP optimizer's ``amp_init`` (after minimize)."""
        return self._get_amp_optimizer().amp_init(place, scope, test_program, use_fp16_test)

    def get_loss_scaling(self) -> Any:
        """Paddle's ``fleet.get_loss_scaling``: the AMP optimizer's loss-scaling variable."""
        return self._get_amp_optimizer().get_loss_scaling()

    def __getattr__(self, name: str) -> Any:  # everything else (get_lr, step ...) comes from the inner optimizer
        if name in ("inner_opt", "__setstate__"):
            raise AttributeError(name)
        return getattr(self.inner_opt, name)


from .pipeline_optimizer import PipelineOptimizer  # noqa: E402
from .ps_optimizer import ParameterServerOptimizer  # noqa: E402
