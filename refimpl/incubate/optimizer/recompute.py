"""``paddle.incubate.optimizer.RecomputeOptimizer``: backward that recomputes the forward.

Mirrors ``python/paddle/incubate/optimizer/recompute.py`` (Paddle 3.3.1, static mode): the
checkpoints set with ``_set_checkpoints`` (Variables or names of the loss's block) go to
``append_backward(..., checkpoints=...)`` (``refimpl/static/backward_recompute.py``), which keeps
only them (and the vars crossing segments) alive through the forward and re-runs the rest of
each segment in the backward; the update is the wrapped optimizer's. ``_enable_offload`` (set
``checkpoint_shape`` too) copies the checkpoints to pinned host memory and back
(``recompute_offload.py``). Differences from Paddle: bad checkpoints raise
:class:`CheckpointsError` (an InvalidArgument that is also the AssertionError Paddle's ``assert``
raises), naming the value, and a bad ``checkpoint_shape`` is refused before the backward is built;
an ``optimizer`` that is not one raises :class:`NotAnOptimizerError` (an InvalidArgument that is
also Paddle's AttributeError).
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Set, Tuple, Union

from refimpl.core.errors import InvalidArgument, Unimplemented
from refimpl.framework.program import Program, default_startup_program, program_guard
from refimpl.framework.variable import Variable
from refimpl.static.backward import append_backward

from .recompute_offload import check_checkpoint_shape, offload_checkpoints


class CheckpointsError(InvalidArgument, AssertionError):
    """Checkpoints that are not a list of Variables or names (Paddle: an ``AssertionError``)."""


class NotAnOptimizerError(InvalidArgument, AttributeError):
    """``optimizer`` is not an optimizer (Paddle: the ``AttributeError`` of reading its ``_learning_rate``)."""


class RecomputeOptimizer:
    """Wrap ``optimizer`` so that its backward recomputes the forward between checkpoints."""

    def __init__(self, optimizer: Any) -> None:
        if not all(hasattr(optimizer, a) for a in ("_learning_rate", "_learning_rate_map")):
            raise NotAnOptimizerError("RecomputeOptimizer: argument 'optimizer' should be an optimizer "
                                      f"(e.g. paddle.optimizer.SGD), got {optimizer!r} ({type(optimizer).__name__})")
        self._optimizer = optimizer
        self._checkpoints: Optional[List[Union[Variable, str]]] = None
        self._learning_rate = optimizer._learning_rate
        self._learning_rate_map = optimizer._learning_rate_map
        self.enable_offload = False
        self.checkpoint_shape: List[int] = []

    def _set_checkpoints(self, checkpoints: List[Union[Variable, str]]) -> None:
        if not isinstance(checkpoints, list):
            raise CheckpointsError("_checkpoints should be a list of Variable or a list of String, "
                                   f"got {checkpoints!r} ({type(checkpoints).__name__})")
        for c in checkpoints:
            if not isinstance(c, (Variable, str)):
                raise CheckpointsError("_checkpoints should be a list of Variable or a list of String, "
                                       f"got the item {c!r} ({type(c).__name__})")
        self._checkpoints = checkpoints

    def _enable_offload(self) -> None:
        """Offload the checkpoints in the next ``backward`` (call before it; set ``checkpoint_shape``)."""
        self.enable_offload = True

    def load(self, state_dict: Any) -> None:
        raise Unimplemented("load function is not supported by Recompute Optimizer for now")

    def _require_checkpoints(self) -> List[Union[Variable, str]]:
        if self._checkpoints is None:
            raise CheckpointsError("You should call _set_checkpoints first")
        return self._checkpoints

    def backward(self, loss: Variable, startup_program: Optional[Program] = None,
                 parameter_list: Optional[Sequence[Any]] = None, no_grad_set: Optional[Set[Any]] = None,
                 callbacks: Optional[Sequence[Callable[..., Any]]] = None) -> List[Tuple[Any, Any]]:
        """``append_backward`` with the checkpoints; ``[(param, grad)]``."""
        checkpoints = self._require_checkpoints()
        if self.enable_offload:
            check_checkpoint_shape(self.checkpoint_shape)
        self._dtype = loss.dtype
        with program_guard(loss.block.program, startup_program):
            ckpt_vars = [c if isinstance(c, Variable) else loss.block.var(c) for c in checkpoints]
            result = append_backward(loss, parameter_list, no_grad_set, checkpoints=ckpt_vars)
        if not ckpt_vars:
            if self.enable_offload:  # Paddle fails here on the unbound sorted checkpoint names
                raise CheckpointsError("RecomputeOptimizer offload needs checkpoints, got an empty list")
            return result
        params_grads, sorted_names = result  # type: ignore[misc]
        if self.enable_offload:
            if startup_program is None:
                startup_program = default_startup_program()
            offload_checkpoints(loss, startup_program, sorted_names, self.checkpoint_shape)
        return params_grads

    def apply_gradients(self, params_grads: Sequence[Tuple[Any, Any]]) -> List[Any]:
        return self._optimizer.apply_gradients(params_grads=params_grads)

    def apply_optimize(self, loss: Variable, startup_program: Optional[Program],
                       params_grads: Sequence[Tuple[Any, Any]]) -> List[Any]:
        func = getattr(self._optimizer, "apply_optimize", None) or self._optimizer._apply_optimize
        return func(loss, startup_program=startup_program, params_grads=params_grads)

    def minimize(self, loss: Variable, startup_program: Optional[Program] = None,
                 parameter_list: Optional[Sequence[Any]] = None, no_grad_set: Optional[Set[Any]] = None
                 ) -> Tuple[List[Any], List[Tuple[Any, Any]]]:
        if not isinstance(loss, Variable):
            raise InvalidArgument(f"RecomputeOptimizer.minimize: the loss should be a Variable, got "
                                  f"{type(loss).__name__}")
        self._require_checkpoints()
        params_grads = self.backward(loss, startup_program, parameter_list, no_grad_set)
        optimize_ops = self.apply_optimize(loss, startup_program=startup_program, params_grads=params_grads)
        return optimize_ops, params_grads


__all__ = ["RecomputeOptimizer"]
