"""Paddle's ``paddle/distributed/fleet/meta_optimizers/common.py``: op roles, op predicates, CollectiveHelper.

The names Paddle's meta-optimizers and unit tests import from that module
(``OpRole``, ``OP_ROLE_KEY``, ``OP_ROLE_VAR_KEY``, ``is_update_op``,
``is_loss_grad_op``, ``is_backward_op``, ``is_optimizer_op``,
``CollectiveHelper``) gathered in one place. The predicates live in
``sharding/utils.py`` and the ring bring-up in ``collective_helper.py``;
``CollectiveHelper`` here is the small class over them. Difference: refimpl
has no ports to wait for (``wait_port`` is accepted and ignored); the rings
themselves come from the rank's world (see ``program_rings.py``).
"""
from __future__ import annotations

from typing import Any, List, Optional

from refimpl.framework.op_role import OP_ROLE_ATTR as OP_ROLE_KEY
from refimpl.framework.op_role import OP_ROLE_VAR_ATTR as OP_ROLE_VAR_KEY
from refimpl.framework.op_role import OpRole

from .collective_helper import init_communicator
from .sharding.utils import is_backward_op, is_loss_grad_op, is_optimizer_op, is_update_op


class CollectiveHelper:
    """Brings up ``nrings`` rings of all trainers in a startup program (Paddle's ``CollectiveHelper``)."""

    def __init__(self, role_maker: Any, nrings: int = 1, wait_port: bool = True) -> None:
        self.nrings, self.wait_port, self.role_maker = nrings, wait_port, role_maker
        self.startup_program: Any = None  # set by update_startup_program

    def update_startup_program(self, startup_program: Optional[Any] = None) -> None:
        """Every ring brought up over all trainers, then the parameters broadcast from rank 0."""
        from refimpl.static import default_startup_program
        self.startup_program = startup_program or default_startup_program()
        endpoints: List[str] = self.role_maker._get_trainer_endpoints()
        rank = self.role_maker._worker_index()
        for ring_id in range(self.nrings):
            self._init_communicator(self.startup_program, endpoints[rank], endpoints, rank, ring_id,
                                    self.wait_port)
        self._broadcast_params()

    def _init_communicator(self, program: Any, current_endpoint: Optional[str], endpoints: List[str],
                           rank: int, ring_id: int, wait_port: bool, global_ring_id: Optional[int] = None,
                           sync: bool = True) -> None:
        """Ring ``ring_id``'s start-up ops appended to ``program`` (``collective_helper.init_communicator``)."""
        init_communicator(program, current_endpoint, endpoints, rank, ring_id,
                          global_ring_id=0 if global_ring_id is None else global_ring_id, sync=sync)

    def _broadcast_params(self) -> None:
        """Each non-distributed parameter broadcast from rank 0, the rings taken in turn."""
        block = self.startup_program.global_block()
        ring_id, param = -1, None
        for param in list(block.iter_parameters()):
            if param.is_distributed:
                continue
            ring_id = (ring_id + 1) % self.nrings
            block.append_op(type="broadcast", inputs={"x": param}, outputs={"out": param},
                            attrs={"ring_id": ring_id, "root": 0, OP_ROLE_KEY: OpRole.Forward})
        for ring in range(self.nrings):
            block.append_op(type="c_sync_comm_stream", inputs={"X": param}, outputs={"Out": param},
                            attrs={"ring_id": ring, OP_ROLE_KEY: OpRole.Forward})


__all__ = ["OpRole", "OP_ROLE_KEY", "OP_ROLE_VAR_KEY", "CollectiveHelper", "is_update_op", "is_loss_grad_op",
           "is_backward_op", "is_optimizer_op"]
