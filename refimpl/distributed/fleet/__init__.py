"""``paddle.distributed.fleet``: role makers, DistributedStrategy, hybrid topology.

Mirrors the package of the same name in Paddle 3.3.1. The base classes live
in ``base/`` (one module per concept, as in Paddle); this module re-exports
them. The ``Fleet`` class and its module-level functions (``init``,
``distributed_optimizer`` ...) are added here by their own module.
"""
from .base.distributed_strategy import DistributedStrategy
from .base.mpi_role_maker import MPIRoleMaker
from .base.role_maker import PaddleCloudRoleMaker, Role, RoleMakerBase, UserDefinedRoleMaker
from .base.topology import CommunicateTopology, HybridCommunicateGroup, ParallelMode

__all__ = ["DistributedStrategy", "Role", "RoleMakerBase", "PaddleCloudRoleMaker", "UserDefinedRoleMaker",
           "MPIRoleMaker", "CommunicateTopology", "HybridCommunicateGroup", "ParallelMode"]
