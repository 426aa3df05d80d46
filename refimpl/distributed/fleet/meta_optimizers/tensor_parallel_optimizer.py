"""``TensorParallelOptimizer``: the rings and data parallelism around a tensor-parallel program.

Mirrors ``paddle/distributed/fleet/meta_optimizers/tensor_parallel_optimizer.py``
of Paddle 3.3.1 (legacy IR, the CUDA build). It applies in collective mode
when ``strategy.tensor_parallel`` is on, with ``mp_degree =
tensor_parallel_configs['tensor_parallel_degree']``; it may wrap recompute,
AMP, LARS and LAMB. The model itself is split by the program's own ops
(``paddle.distributed.split`` and the ``fleet.meta_parallel`` layers,
``refimpl/distributed/fleet/layers/mpu``); ``minimize`` runs the inner
optimizer and then writes, into the startup program:

* ring 1 over all ranks, ring 0 over this rank's model-parallel group (the
  ``rank // mp_degree``-th ``mp_degree`` neighbours), each brought up by
  ``collective_helper.init_communicator`` (with its barrier on ring 1);
* a ``broadcast`` from root 0 over ring 0 of every startup parameter not
  marked ``is_distributed``, then a ``c_sync_comm_stream`` of the last one;
* with more ranks than ``mp_degree``: ring 2 over this rank's data-parallel
  group (the ranks ``mp_degree`` apart), a ``broadcast`` over it of every
  parameter and a ``c_sync_comm_stream``;

and, with data parallelism, into the main program: ``scale(loss@GRAD,
1 / dp_degree)`` after the loss-gradient op, an ``all_reduce`` on ring 2 of
each gradient after the op that makes it (a ``c_sync_calc_stream`` first),
and a ``c_sync_comm_stream`` before the first optimizer op.

Rings: Paddle's ring ids are per process; refimpl's worlds name groups
world-wide, so ``minimize`` binds the program's rings 0 / 1 / 2 to this
rank's groups with ``program_rings.bind_rings`` (every rank creates every
group in the same order). A lone process building one trainer's program
among several (as Paddle's unit tests do) binds nothing.

Addition: ``_check_configs`` rejects, before anything is built and the same
on every rank, a degree below 1, a worker count that is not a multiple
of the degree (Paddle asserts the latter only after building), and a
``hybrid_configs['mp_degree']`` > 1 other than the degree (Paddle trains with
``tensor_parallel_degree`` while fleet's topology reports ``mp_degree``).
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Set, Tuple

from refimpl.core.reduce_op import ReduceOp
from refimpl.framework.op_role import OP_ROLE_ATTR, OP_ROLE_VAR_ATTR, OpRole
from refimpl.framework.program import default_startup_program

from ..base.compat_errors import InvalidArgumentAssertion
from .collective_helper import broadcast_params, init_communicator
from .meta_optimizer_base import MetaOptimizerBase, ParamsGrads
from .program_rings import bind_rings, partition
from .raw_program_optimizer import is_backward_op, is_loss_grad_op, is_optimizer_op

__all__ = ["TensorParallelOptimizer"]


class TensorParallelOptimizer(MetaOptimizerBase):
    """Tensor parallelism (plus data parallelism over the replicas), see the module docstring."""

    def __init__(self, optimizer: Any) -> None:
        super().__init__(optimizer)
        self.meta_optimizers_white_list = ["RecomputeOptimizer", "AMPOptimizer", "LarsOptimizer", "LambOptimizer"]
        self.meta_optimizers_black_list = []
        self.mp_ring_id, self.global_ring_id, self.dp_ring_id = 0, 1, 2

    def _set_basic_info(self, loss: Any, role_maker: Any, user_defined_optimizer: Any,
                        user_defined_strategy: Any) -> None:
        super()._set_basic_info(loss, role_maker, user_defined_optimizer, user_defined_strategy)
        self.mp_degree = user_defined_strategy.tensor_parallel_configs["tensor_parallel_degree"]

    def _can_apply(self) -> bool:
        return bool(self.role_maker._is_collective and self.user_defined_strategy.tensor_parallel)

    def _disable_strategy(self, dist_strategy: Any) -> None:
        dist_strategy.tensor_parallel = False
        dist_strategy.tensor_parallel_configs = {}

    def _enable_strategy(self, dist_strategy: Any, context: Optional[dict] = None) -> None:
        dist_strategy.tensor_parallel = True
        dist_strategy.tensor_parallel_configs = {"tensor_parallel_degree": 1}

    def _check_configs(self, loss: Any) -> None:
        degree, nranks = self.mp_degree, len(self.role_maker._get_trainer_endpoints())
        if isinstance(degree, bool) or not isinstance(degree, int) or degree < 1:
            raise InvalidArgumentAssertion(f"tensor_parallel_configs['tensor_parallel_degree'] must be an int >= 1, "
                                           f"got {degree!r}")
        if nranks % degree:
            raise InvalidArgumentAssertion(f"tensor_parallel_configs['tensor_parallel_degree'] = {degree} does not "
                                           f"divide the {nranks} workers (the world must be mp_degree x dp_degree)")
        hybrid = int(self.user_defined_strategy.hybrid_configs.get("mp_degree", 1) or 1)
        if hybrid > 1 and hybrid != degree:  # fleet's topology would say one degree, the program train another
            raise InvalidArgumentAssertion(f"tensor_parallel_configs['tensor_parallel_degree'] ({degree}) and "
                                           f"hybrid_configs['mp_degree'] ({hybrid}) must be equal")

    # ---- the process groups ------------------------------------------------------------------------
    def _get_process_group_info(self) -> None:
        n, mp, rank = self.nranks, self.mp_degree, self.rank
        self.global_endpoints, self.global_rank, self.global_nranks = self.endpoints, rank, n
        self.mp_rank, self.mp_nranks = rank % mp, mp
        self.mp_endpoints = [self.endpoints[i] for i in range(n) if i // mp == rank // mp]
        if n > mp:
            self.dp_rank, self.dp_nranks = rank // mp, n // mp
            self.dp_endpoints = [self.endpoints[rank % mp + i * mp] for i in range(self.dp_nranks)]

    def _bind_rings(self) -> None:
        """refimpl: rings 0 / 1 / 2 of the program bound to this rank's groups of the world."""
        n, mp = self.nranks, self.mp_degree
        rings = [(self.mp_ring_id, partition(n, mp, 1)), (self.global_ring_id, [list(range(n))])]
        if n > mp:
            rings.append((self.dp_ring_id, partition(n, n // mp, mp)))
        bind_rings(rings)

    def _init_process_group(self) -> None:
        self._get_process_group_info()
        self._bind_rings()
        startup = self.startup_program
        init_communicator(startup, self.current_endpoint, self.global_endpoints, self.global_rank,
                          self.global_ring_id, self.global_ring_id, True)
        init_communicator(startup, self.current_endpoint, self.mp_endpoints, self.mp_rank, self.mp_ring_id,
                          self.global_ring_id, True)
        self._broadcast_params(self.mp_ring_id, mp_mode=True)
        if self.nranks > self.mp_degree:
            init_communicator(startup, self.current_endpoint, self.dp_endpoints, self.dp_rank, self.dp_ring_id,
                              self.global_ring_id, True)
            self._broadcast_params(self.dp_ring_id, mp_mode=False)

    def _broadcast_params(self, ring_id: int, mp_mode: bool) -> None:
        """Rank 0's value of the startup parameters (in mp mode: those not ``is_distributed``) over
        ``ring_id``, in the order they were created (as Paddle)."""
        broadcast_params(self.startup_program, ring_id, by_name=False, skip_distributed=mp_mode)

    # ---- minimize ----------------------------------------------------------------------------------
    def minimize_impl(self, loss: Any, startup_program: Optional[Any] = None,
                      parameter_list: Optional[Sequence[Any]] = None,
                      no_grad_set: Optional[Set[Any]] = None) -> Tuple[List[Any], ParamsGrads]:
        self._check_configs(loss)
        self.endpoints = list(self.role_maker._get_trainer_endpoints())
        self.current_endpoint = self.endpoints[self.role_maker._worker_index()]
        self.startup_program = startup_program if startup_program is not None else default_startup_program()
        optimize_ops, params_grads = self.inner_opt.minimize(loss, self.startup_program, parameter_list,
                                                             no_grad_set)
        self.main_program = loss.block.program
        self.nranks = len(self.endpoints)
        self.rank = self.role_maker._worker_index()
        self._init_process_group()
        if self.nranks > self.mp_degree:
            self._transpile_main_program(loss, self.nranks // self.mp_degree)
        return optimize_ops, params_grads

    def _transpile_main_program(self, loss: Any, dp_degree: int) -> None:
        self._insert_loss_grad_ops(loss, dp_degree)
        self._insert_allreduce_ops(loss, self.dp_ring_id)

    def _insert_loss_grad_ops(self, loss: Any, dp_degree: int) -> None:
        """Scale ``loss@GRAD`` by 1/dp_degree: the summed gradients are then the mean over the replicas."""
        block = loss.block
        for idx in reversed(range(len(block.ops))):
            op = block.ops[idx]
            if is_loss_grad_op(op):
                g = block.var(op.output_arg_names[0])
                block._insert_op(idx + 1, type="scale", inputs={"X": g}, outputs={"Out": g},
                                 attrs={"scale": 1.0 / dp_degree, OP_ROLE_ATTR: OpRole.Backward})
                break

    def _insert_allreduce_ops(self, loss: Any, ring_id: int) -> None:
        """An ``all_reduce`` over the replicas of every gradient, right after the op that makes it."""
        block = loss.block
        grad = None
        for idx in reversed(range(len(block.ops))):
            op = block.ops[idx]
            names = list(op.all_attrs().get(OP_ROLE_VAR_ATTR) or []) if is_backward_op(op) else []
            offset = idx
            for i in range(0, len(names), 2):
                grad = block.var(names[i + 1])
                if offset == idx:
                    offset += 1
                    block._insert_op(offset, type="c_sync_calc_stream", inputs={"X": grad}, outputs={"Out": grad},
                                     attrs={OP_ROLE_ATTR: OpRole.Backward})
                    offset += 1
                block._insert_op(offset, type="all_reduce", inputs={"x": grad}, outputs={"out": grad},
                                 attrs={"ring_id": ring_id, "reduce_type": ReduceOp.SUM,
                                        OP_ROLE_ATTR: OpRole.Backward})
        if grad is None:
            return
        for idx, op in enumerate(block.ops):
            if is_optimizer_op(op):
                block._insert_op(idx, type="c_sync_comm_stream", inputs={"X": grad}, outputs={"Out": grad},
                                 attrs={"ring_id": ring_id, OP_ROLE_ATTR: OpRole.Backward})
                break
