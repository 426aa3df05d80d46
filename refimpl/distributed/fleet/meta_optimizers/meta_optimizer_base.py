"""``MetaOptimizerBase``: the base of fleet's meta-optimizers, wrapping an inner optimizer.

Mirrors ``paddle/distributed/fleet/meta_optimizers/meta_optimizer_base.py``
of Paddle 3.3.1: an ``Optimizer`` whose ``backward``, ``apply_gradients``
and ``apply_optimize`` forward to ``inner_opt``, whose ``minimize`` is
``minimize_impl`` (backward, then apply_optimize), and which by default
cannot apply (``_can_apply()`` is False) and leaves ``_disable_strategy`` /
``_enable_strategy`` to subclasses; ``_can_update(other)`` is whether
``other``'s class name is in ``meta_optimizers_white_list``, the edge the
strategy compiler chains by. Addition: ``_check_configs(loss)``, called on
each meta-optimizer of the chosen chain before anything is built (by
``distributed_optimizer.DistributedOptimizer``), to reject bad configs.
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Set, Tuple, TYPE_CHECKING

from refimpl.core.errors import Unimplemented
from refimpl.optimizer import Optimizer

if TYPE_CHECKING:
    from refimpl.framework.operator import Operator
    from refimpl.framework.program import Program
    from refimpl.framework.variable import Parameter, Variable

ParamsGrads = List[Tuple["Parameter", "Variable"]]


class MetaOptimizerBase(Optimizer):
    """A meta-optimizer over ``optimizer`` (see the module docstring)."""

    def __init__(self, optimizer: Optimizer) -> None:  # no Optimizer.__init__: the state is the inner one's
        self.inner_opt = optimizer
        # Paddle's MetaOptimizerBase.__init__ copies these two private fields of the inner optimizer too
        self._learning_rate = optimizer._learning_rate
        self._learning_rate_map = optimizer._learning_rate_map
        self.meta_optimizers_white_list: List[str] = []
        self.meta_optimizers_black_list: List[str] = []

    def _set_basic_info(self, loss: Variable, role_maker: Any, user_defined_optimizer: Optimizer,
                        user_defined_strategy: Any) -> None:
        self.loss, self.role_maker = loss, role_maker
        self.user_defined_optimizer, self.user_defined_strategy = user_defined_optimizer, user_defined_strategy

    def _update_inner_optimizer(self, optimizer: Optimizer) -> None:
        self.inner_opt = optimizer

    def _can_apply(self) -> bool:
        return False

    def _check_configs(self, loss: Variable) -> None:
        """refimpl: reject bad configs before anything is built (typed errors); nothing to check here."""

    def _is_graph_out(self) -> bool:
        return False

    def _can_update(self, optimizer: Any) -> bool:
        return type(optimizer).__name__ in self.meta_optimizers_white_list

    def _disable_strategy(self, dist_strategy: Any) -> None:
        raise Unimplemented(f"you should implement disable strategy in {type(self).__name__}")

    def _enable_strategy(self, dist_strategy: Any, context: Optional[dict] = None) -> None:
        raise Unimplemented(f"you should implement enable strategy in {type(self).__name__}")

    def apply_gradients(self, params_grads: Sequence[Tuple[Parameter, Variable]]) -> List[Operator]:
        return self.inner_opt.apply_gradients(params_grads)

    def backward(self, loss: Variable, startup_program: Optional[Program] = None,
                 parameter_list: Optional[Sequence[Any]] = None, no_grad_set: Optional[Set[Any]] = None,
                 callbacks: Optional[Sequence[Callable[..., Any]]] = None) -> ParamsGrads:
        return self.inner_opt.backward(loss, startup_program, parameter_list, no_grad_set, callbacks)

    def apply_optimize(self, loss: Variable, startup_program: Optional[Program],
                       params_grads: Sequence[Tuple[Parameter, Variable]]) -> List[Operator]:
        # as Paddle's MetaOptimizerBase.apply_optimize: the inner optimizer's private _apply_optimize
        return self.inner_opt._apply_optimize(loss, startup_program=startup_program, params_grads=params_grads)

    _apply_optimize = apply_optimize

    def minimize_impl(self, loss: Variable, startup_program: Optional[Program] = None,
                      parameter_list: Optional[Sequence[Any]] = None,
                      no_grad_set: Optional[Set[Any]] = None) -> Tuple[List[Operator], ParamsGrads]:
        params_grads = self.backward(loss, startup_program, parameter_list, no_grad_set)
        return self.apply_optimize(loss, startup_program, params_grads), params_grads

    def minimize(self, loss: Variable, startup_program: Optional[Program] = None,
                 parameter_list: Optional[Sequence[Any]] = None,
                 no_grad_set: Optional[Set[Any]] = None) -> Tuple[List[Operator], ParamsGrads]:
        return self.minimize_impl(loss, startup_program, parameter_list, no_grad_set)


class WrappingMetaOptimizer(MetaOptimizerBase):
    """A meta-optimizer that stands for one refimpl optimizer made from the strategy: AMP's decorated
    optimizer, recompute's, LAMB's, LARS's, DGC's. Subclasses say how to make it (``_wrapped``, built
    on first use, as Paddle builds it when the strategy is known); backward, the updates and
    ``minimize_impl`` are that optimizer's."""

    def _wrapped(self) -> Any:
        raise Unimplemented(f"{type(self).__name__} must say which optimizer it wraps (_wrapped)")

    def backward(self, loss: Variable, startup_program: Optional[Program] = None,
                 parameter_list: Optional[Sequence[Any]] = None, no_grad_set: Optional[Set[Any]] = None,
                 callbacks: Optional[Sequence[Callable[..., Any]]] = None) -> ParamsGrads:
        return self._wrapped().backward(loss, startup_program, parameter_list, no_grad_set, callbacks)

    def apply_gradients(self, params_grads: Sequence[Tuple[Parameter, Variable]]) -> List[Operator]:
        return self._wrapped().apply_gradients(params_grads)

    def apply_optimize(self, loss: Variable, startup_program: Optional[Program],
                       params_grads: Sequence[Tuple[Parameter, Variable]]) -> List[Operator]:
        return self._wrapped().apply_optimize(loss, startup_program, params_grads)

    _apply_optimize = apply_optimize

    def minimize_impl(self, loss: Variable, startup_program: Optional[Program] = None,
                      parameter_list: Optional[Sequence[Any]] = None,
                      no_grad_set: Optional[Set[Any]] = None) -> Tuple[List[Operator], ParamsGrads]:
        return self._wrapped().minimize(loss, startup_program, parameter_list, no_grad_set)


__all__ = ["MetaOptimizerBase", "WrappingMetaOptimizer"]
