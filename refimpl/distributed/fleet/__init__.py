"""``paddle.distributed.fleet``: role makers, DistributedStrategy, hybrid topology.

Mirrors the package of the same name in Paddle 3.3.1. The base classes live
in ``base/`` (one module per concept, as in Paddle); this module re-exports
them. The ``Fleet`` class and its module-level functions (``init``,
``distributed_optimizer`` ...) are added here by their own module, and
``util`` (``base.util_factory``), the ``UtilBase`` instance Paddle keeps here.
"""
from .base.distributed_strategy import DistributedStrategy
from .base.mpi_role_maker import MPIRoleMaker
from .base.role_maker import PaddleCloudRoleMaker, Role, RoleMakerBase, UserDefinedRoleMaker
from .base.topology import CommunicateTopology, HybridCommunicateGroup, ParallelMode
from .base.util_factory import FleetUtil, UtilBase

__all__ = ["DistributedStrategy", "Role", "RoleMakerBase", "PaddleCloudRoleMaker", "UserDefinedRoleMaker",
           "MPIRoleMaker", "CommunicateTopology", "HybridCommunicateGroup", "ParallelMode", "UtilBase"]
from .fleet import Fleet, get_log_level_code, get_log_level_name, set_log_level  # noqa: E402
from .fleet import fleet  # noqa: E402  (the instance, as paddle.distributed.fleet.fleet)
from . import utils  # noqa: E402,F401  (paddle.distributed.fleet.utils: LocalFS ...)
from . import layers, meta_parallel  # noqa: E402,F401  (the tensor-parallel layers, fleet.meta_parallel.*)

#: Paddle's module-level ``UtilBase`` (``fleet.util.get_file_shard`` ...); it follows the calling rank's fleet
util = FleetUtil(fleet)

_final_strategy = fleet._final_strategy
_get_applied_meta_list = fleet._get_applied_meta_list
_get_applied_graph_list = fleet._get_applied_graph_list
init = fleet.init
is_first_worker = fleet.is_first_worker
worker_index = rank = fleet.worker_index
worker_num = nranks = world_size = fleet.worker_num
node_num = fleet.node_num
local_device_ids = fleet.local_device_ids
world_device_ids = fleet.world_device_ids
local_rank = rank_in_node = fleet.local_rank
is_worker = fleet.is_worker
is_coordinator = fleet.is_coordinator
worker_endpoints = fleet.worker_endpoints
server_num = fleet.server_num
server_index = fleet.server_index
server_endpoints = fleet.server_endpoints
is_server = fleet.is_server
barrier_worker = fleet.barrier_worker
all_reduce = fleet.all_reduce
init_worker = fleet.init_worker
init_server = fleet.init_server
run_server = fleet.run_server
stop_worker = fleet.stop_worker
save_persistables = fleet.save_persistables
load_persistables = fleet.load_persistables  # refimpl: sharded collective load (sharding/persistables.py)
save_inference_model = fleet.save_inference_model
load_model = fleet.load_model
shrink = fleet.shrink
distributed_optimizer = fleet.distributed_optimizer
minimize = fleet.minimize
amp_init = fleet.amp_init
get_hybrid_communicate_group = fleet.get_hybrid_communicate_group
collective_perf = fleet.collective_perf

from refimpl.framework import namespace_getattr as _namespace_getattr  # noqa: E402
__getattr__ = _namespace_getattr(__name__)  # a Paddle name refimpl lacks: Unimplemented, naming it
