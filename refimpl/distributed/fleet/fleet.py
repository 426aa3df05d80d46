"""``Fleet``: the one object a distributed training script talks to.

Mirrors ``paddle/distributed/fleet/fleet.py`` of Paddle 3.3.1: class ``Fleet``
and the instance ``fleet`` whose bound methods are the module functions
(``fleet.init``, ``fleet.worker_index`` ...). ``init`` checks its arguments as
Paddle does, keeps a deep copy of the strategy, generates the role and, in
collective mode, sets up Paddle's static groups (the ``'global'`` ring, ring 3
with sharding, a ``'model'`` group when sharding / tensor parallel ask for an
mp degree > 1) and, when a ``hybrid_configs`` degree is > 1, the
``HybridCommunicateGroup``. Then: the role accessors, ``barrier_worker``,
``all_reduce`` (NumPy in and out), ``collective_perf`` (allreduce / reduce /
broadcast on the data or sharding group, allgather / reduce_scatter on the
model group), ``distributed_optimizer`` and ``minimize``.

Differences from Paddle:

* **Per-rank state.** refimpl can run ranks as threads, so a ``Fleet`` keeps
  its attributes per rank context (``fleet._role_maker`` in rank 2's thread
  is rank 2's).
* Collective mode without a ``role_maker`` uses ``MPIRoleMaker``, and ``init``
  first joins the in-process or MPI world (``init_parallel_env``).
* Static-graph only, yet the hybrid group is built as by Paddle's dygraph
  ``init``, when a degree is > 1 (context / expert / moe-sharding > 1:
  ``Unimplemented``), but without that ``init``'s model-parallel RNG seeding
  (``model_parallel_random_seed``, ``layers/mpu/random.py``): as Paddle's
  static ``init``, the user's ``paddle.seed`` is left alone; a script calls
  ``model_parallel_random_seed`` itself for per-rank tracker seeds. ``init``
  returns the fleet.
* ``distributed_optimizer`` returns a ``meta_optimizers.DistributedOptimizer``
  (Paddle's static one returns the fleet); ``fleet.minimize`` delegates to it,
  and it runs Paddle's ``_minimize_impl`` (the meta-optimizer factory and
  strategy compiler), putting Paddle's context (``valid_strategy``,
  ``applied_meta_list`` ...) back here; ``amp_init`` forwards to its AMP
  meta-optimizer.
* ``collective_perf`` runs the body of ``fleet.py``'s ``collective_perf``
  (Paddle 3.3.1 comments it out), warms up on the tested group (Paddle's warm-up has no group and only warns)
  and returns ``{nbytes: seconds per iteration}``.
* Errors are typed and say what is wrong; each is also the builtin Paddle
  raises (``ValueError``, ``AssertionError``, ``AttributeError`` before init).
* Parameter-server mode (``init`` without ``is_collective`` on a PS job)
  runs ``refimpl.distributed.ps``: ``init_server(dirname)``, ``run_server``,
  ``init_worker``, ``stop_worker``, ``barrier_worker`` (through server 0),
  ``save_persistables`` / ``save_inference_model`` / ``load_model`` (the
  values gathered from the servers, one ``.npz``), ``shrink`` (dense tables
  only: nothing to drop). Thread ranks of ``ps.run_ps_in_process`` get their
  role from the rank, not the environment. As in Paddle, these methods
  raise ``ValueError`` before ``minimize`` (no runtime handler, see
  ``base.runtime_factory``) and, in collective or non-distributed mode,
  warn and do nothing.
* ``paddle.distributed.fleet.util`` (``base.util_factory.FleetUtil``) follows
  the calling rank's role maker and strategy.
"""
from __future__ import annotations

import copy
import logging
import threading
from typing import Any, List, Optional, Sequence, Set, TYPE_CHECKING, Tuple, Union
import weakref

import numpy as np

from refimpl.core.errors import InvalidArgument, PreconditionNotMet, Unimplemented

from .base.compat_errors import InvalidArgumentAssertion, InvalidArgumentAttribute
from .base.compat_errors import PreconditionAssertion
from .base.distributed_strategy import DistributedStrategy
from .comm_groups import _CommunicateGroup, static_comm_groups
from .base.mpi_role_maker import MPIRoleMaker
from .base.role_maker import PaddleCloudRoleMaker, RoleMakerBase
from .base.runtime_factory import install as _guard_runtime_methods
from .base import topology as tp
from .collective_perf import CollectivePerf
from .utils.log_util import get_log_level_code, get_log_level_name, set_log_level
from refimpl.distributed.ps.fleet_api import ParameterServerAPI
from .meta_optimizers.sharding.persistables import ShardedPersistablesAPI

if TYPE_CHECKING:
    from refimpl.framework.operator import Operator
    from refimpl.framework.program import Program
    from refimpl.framework.variable import Parameter, Variable
    from refimpl.optimizer.optimizer import Optimizer
    from .meta_optimizers.distributed_optimizer import DistributedOptimizer

logger = logging.getLogger("refimpl.distributed.fleet")
_HYBRID_AXES = {"dp": "data", "pp": "pipe", "sharding": "sharding", "mp": "model", "sep": "sep", "cp": "context",
                "ep": "expert", "moe_sharding": "moe_sharding"}

#: not initialised yet (Paddle: AttributeError on its ``None`` role maker)
NotInitialized = type("NotInitialized", (PreconditionNotMet, AttributeError), {"kind": PreconditionNotMet.kind})
#: an unknown name in ``hybrid_parallel_order`` (Paddle: KeyError; its intended check is an assert)
HybridOrderError = type("HybridOrderError", (InvalidArgumentAssertion, KeyError), {})


class _RankState:
    """One rank's fleet attributes (the ones Paddle's ``Fleet.__init__`` / ``init`` set)."""

    def __init__(self):
        from refimpl.optimizer import Optimizer
        self._role_maker = self.strategy_compiler = self._runtime_handle = self._util = None
        self._is_collective, self._context = False, {}
        self.user_defined_optimizer = Optimizer(0.0)  # as Paddle: a base optimizer until distributed_optimizer
        self._user_defined_strategy = self._hcg = self._topology = self._distributed_optimizer = None
        self._ps_job = self._ps_runtime = None  # parameter-server mode: the split job, this rank's runtime


def _ask(method, doc):
    """A ``Fleet`` method answering the role maker's ``method()``."""
    def accessor(self):
        return getattr(self._rm(), method)()
    accessor.__name__ = method.lstrip("_").replace("get_", "")  # _get_node_num -> node_num
    accessor.__doc__ = doc
    return accessor


def _ps_role_maker():
    """PS mode's role maker: the thread rank's in a ``run_ps_in_process`` job, else from the environment."""
    from refimpl.distributed.ps import thread_role_maker
    return thread_role_maker() or PaddleCloudRoleMaker(is_collective=False)


def _check_strategy(strategy):
    if not isinstance(strategy, DistributedStrategy):
        raise InvalidArgumentAttribute(f"`strategy` should be an instance of `DistributedStrategy`, "
                                       f"but got {type(strategy)}")


@_guard_runtime_methods
class Fleet(CollectivePerf, ShardedPersistablesAPI, ParameterServerAPI):
    """Unified API for distributed training (see the module docstring); one state per rank."""

    def __init__(self):
        object.__setattr__(self, "_states", weakref.WeakKeyDictionary())  # rank context -> _RankState
        object.__setattr__(self, "_states_lock", threading.Lock())

    # ---- per-rank attributes -------------------------------------------------------------------
    def _state(self):
        from refimpl.distributed.communication import context
        ctx = context.current()
        with self._states_lock:
            state = self._states.get(ctx)
            if state is None:
                state = self._states[ctx] = _RankState()
        return state

    def __getattr__(self, name):  # only for names not found on the class: the rank's attributes
        if name.startswith("__") or name in ("_states", "_states_lock"):
            raise AttributeError(name)
        try:
            return getattr(self._state(), name)
        except AttributeError:
            raise AttributeError(f"'Fleet' object has no attribute '{name}'") from None

    def __setattr__(self, name, value):
        setattr(self._state(), name, value)

    def _rm(self):
        if self._role_maker is None:
            raise NotInitialized("fleet is not initialized on this rank: call fleet.init(...) first")
        return self._role_maker

    # ---- read-only views for fleet.util and DistributedOptimizer (refimpl's; Paddle reads the fields) ----
    @property
    def role_maker(self) -> Optional[RoleMakerBase]:
        """This rank's role maker (None before ``init``)."""
        return self._role_maker

    @property
    def is_collective(self) -> bool:
        """Whether ``init`` chose collective mode (False before ``init``)."""
        return bool(self._is_collective)

    @property
    def strategy(self) -> Optional[DistributedStrategy]:
        """The strategy ``minimize`` applied, else the one of ``init`` / ``distributed_optimizer``."""
        applied = getattr(self._distributed_optimizer, "applied_strategy", None)
        return applied if applied is not None else self._user_defined_strategy

    def record_minimized(self, runtime_handle: Any, ps_job: Any = None, context: Optional[dict] = None) -> None:
        """What ``DistributedOptimizer.minimize`` made: the runtime handle, in PS mode the split job, and
        Paddle's context (``valid_strategy``, ``applied_meta_list`` ...)."""
        self._runtime_handle = runtime_handle
        if ps_job is not None:
            self._ps_job = ps_job
        if context is not None:
            self._context = context

    # ---- init ----------------------------------------------------------------------------------
    def init(self, role_maker: Optional[RoleMakerBase] = None, is_collective: bool = False,
             strategy: Optional[DistributedStrategy] = None, log_level: Union[str, int] = "INFO") -> Fleet:
        """Set up this rank's role (and, in collective mode, its groups); return the fleet."""
        set_log_level(log_level)
        strategy = DistributedStrategy() if strategy is None else strategy
        _check_strategy(strategy)
        strategy = copy.deepcopy(strategy)
        if role_maker is None:
            if not isinstance(is_collective, bool):
                raise InvalidArgument(f"`is_collective` should be instance of `bool`, but got {type(is_collective)}")
            role_maker = MPIRoleMaker() if is_collective else _ps_role_maker()
        elif not isinstance(role_maker, RoleMakerBase):
            raise InvalidArgument(f"`role_maker` should be subclass of `RoleMakerBase`, but got {type(role_maker)}")
        is_collective = bool(getattr(role_maker, "_is_collective", False))
        if is_collective:  # refimpl: join the in-process or MPI world first; the state is kept per rank
            from refimpl.distributed.collective import init_parallel_env
            init_parallel_env()
        else:  # a PS job under mpiexec: join it now, since the fleet's state is kept per rank context
            from refimpl.distributed.ps.runtime import join_mpi_if_launched
            join_mpi_if_launched()
        role_maker._generate_role()
        self._user_defined_strategy, self._role_maker, self._is_collective = strategy, role_maker, is_collective
        self._hcg = self._topology = None
        if is_collective:
            self._init_collective_groups()
            if not strategy.heter_ccl_mode and any(strategy.hybrid_configs[f"{k}_degree"] > 1 for k in _HYBRID_AXES):
                self._init_hybrid_parallel_env()
        return self

    def _init_collective_groups(self):
        """Paddle's static collective setup: the 'global' ring and, for sharding / tensor parallel, 'model'."""
        self._hcg = static_comm_groups(self._user_defined_strategy, self.worker_index(), self.worker_num())

    def _init_hybrid_parallel_env(self):
        """Build this rank's HybridCommunicateGroup from ``hybrid_configs`` (Paddle's dygraph setup)."""
        from refimpl.distributed.collective import get_world_size
        s = self._user_defined_strategy
        self.hybrid_configs = h = s.hybrid_configs
        degrees = {k: h[f"{k}_degree"] for k in _HYBRID_AXES}
        for k in ("mp", "pp", "sep", "cp", "sharding"):
            if degrees[k] < 0:
                raise InvalidArgumentAssertion(f"{k}_degree should be greater or equal to 0, got {degrees[k]}")
        for k in ("mp", "pp", "sep", "cp", "ep", "moe_sharding"):
            degrees[k] = max(degrees[k], 1)
        if degrees["dp"] < 0:  # as Paddle: the ranks left over by model and pipeline parallelism
            degrees["dp"] = get_world_size() // (degrees["mp"] * degrees["pp"])
        degrees["dp"] = max(degrees["dp"], 1)
        for k in ("dp", "mp", "pp", "sep", "cp", "sharding"):
            setattr(self, f"{k}_degree", degrees[k])
        for k in ("cp", "ep", "moe_sharding"):
            if degrees[k] > 1:
                raise Unimplemented(f"hybrid_configs['{k}_degree'] = {degrees[k]}: refimpl's hybrid group has "
                                    f"no {_HYBRID_AXES[k]} axis")
        order = list(s.hybrid_parallel_order)
        unknown = [n for n in order if n not in _HYBRID_AXES]
        if unknown:
            raise HybridOrderError(f"The order of hybrid_config setting is incorrect: {unknown} in {order}; "
                                   f"the names are {list(_HYBRID_AXES)}")
        names, dims = [_HYBRID_AXES[n] for n in order], [degrees[n] for n in order]
        old = tp.get_hybrid_communicate_group()
        if old is not None and old.topology().get_hybrid_group_names() == names and \
                [old.topology().get_dim(n) for n in names] == dims:
            logger.warning("The dygraph hybrid parallel environment has been initialized.")
            self._hcg, self._topology = old, old.topology()
            return
        self._topology = tp.CommunicateTopology(hybrid_group_names=names, dims=dims)
        self._hcg = tp.HybridCommunicateGroup(self._topology, h)
        # Paddle's dygraph init would now call model_parallel_random_seed when mp > 1; its static
        # branch (refimpl's only one) leaves the user's paddle.seed alone, and so does refimpl.

    def get_hybrid_communicate_group(self) -> Optional[tp.HybridCommunicateGroup]:
        if self._hcg is None:
            raise PreconditionAssertion("no hybrid communicate group on this rank: call fleet.init(...) first")
        return self._hcg

    def get_static_comm_groups(self) -> _CommunicateGroup:
        """This rank's static group table ('global', and 'model' for tensor parallelism / sharding's
        mp_degree), made by ``init`` (again from its strategy when a hybrid group replaced it); refimpl's
        public view of what Paddle's static code reads from ``tp._HYBRID_PARALLEL_GROUP``."""
        if self._role_maker is None or not self._is_collective:
            raise PreconditionAssertion("no static communicate groups on this rank: call "
                                        "fleet.init(is_collective=True, strategy=...) first")
        if isinstance(self._hcg, _CommunicateGroup):
            return self._hcg
        return static_comm_groups(self._user_defined_strategy, self.worker_index(), self.worker_num())

    def get_hybrid_parallel_topology(self) -> Optional[tp.CommunicateTopology]:
        if self._topology is None:
            raise PreconditionAssertion("no hybrid parallel topology on this rank: call fleet.init(is_collective="
                                        "True, strategy=s) with a degree > 1 in s.hybrid_configs first")
        return self._topology

    # ---- role accessors (the role maker's answers) --------------------------------------------------
    is_first_worker = _ask("_is_first_worker", "Whether this is worker 0.")
    worker_index = _ask("_worker_index", "This worker's index (its rank among the workers).")
    worker_num = _ask("_worker_num", "The number of workers.")
    node_num = _ask("_get_node_num", "The number of machines the workers run on.")
    local_rank = _ask("_get_local_rank", "This worker's rank on its machine (a str, None if unknown).")
    local_device_ids = _ask("_get_local_device_ids", "The device ids of this worker (None if unknown).")
    world_device_ids = _ask("_get_world_device_ids", "The device ids of all workers (None if unknown).")
    is_worker = _ask("_is_worker", "Whether this process is a worker.")
    is_coordinator = _ask("_is_coordinator", "Whether this process is a coordinator.")
    server_index = _ask("_server_index", "This process's index (as a server).")
    is_server = _ask("_is_server", "Whether this process is a parameter server.")

    def worker_endpoints(self, to_string: bool = False) -> Union[str, List[str]]:
        eps = self._rm()._get_trainer_endpoints()
        return ",".join(eps) if to_string else eps

    def server_num(self) -> int:
        return len(self._rm()._get_pserver_endpoints() or [])

    def server_endpoints(self, to_string: bool = False) -> Union[str, List[str]]:
        eps = self._rm()._get_pserver_endpoints()
        return ",".join(eps or []) if to_string else eps

    def barrier_worker(self) -> None:
        """Wait until every worker has arrived (in PS mode: through server 0)."""
        rm = self._rm()
        if not self._is_collective and not rm._is_non_distributed() and self._ps_runtime is not None:
            self._ps_runtime.require_client("barrier_worker").barrier()
        else:
            rm._barrier("worker")

    def all_reduce(self, input: Any, mode: str = "sum") -> Any:
        """``input`` (number, list or array) reduced over all workers; mode: sum, mean, max, min or prod."""
        modes = ("sum", "mean", "max", "min", "prod")
        if not isinstance(mode, str) or mode.lower() not in modes:
            raise InvalidArgument(f"all_reduce: mode must be one of {list(modes)}, got {mode!r}")
        rm = self._rm()
        if mode.lower() != "mean":
            return rm._all_reduce(input, mode.lower(), "worker")
        return rm._all_reduce(np.asarray(input, dtype=np.float64), "sum", "worker") / rm._worker_num()

    # ---- optimizer -----------------------------------------------------------------------------
    def distributed_optimizer(self, optimizer: Optimizer,
                              strategy: Optional[DistributedStrategy] = None) -> DistributedOptimizer:
        """Wrap ``optimizer`` for distributed training; ``strategy`` (if given) replaces init's (no init needed)."""
        self.user_defined_optimizer = optimizer
        if strategy is not None:
            _check_strategy(strategy)
            if self._is_collective:
                logger.warning("It is recommended to use DistributedStrategy in fleet.init(). The strategy here is "
                               "only for compatibility. If the strategy in fleet.distributed_optimizer() is not "
                               "None, then it will overwrite the DistributedStrategy in fleet.init(), which will "
                               "take effect in distributed training.")
            self._user_defined_strategy = copy.deepcopy(strategy)
        self._context = {}
        from .meta_optimizers import DistributedOptimizer
        self._distributed_optimizer = DistributedOptimizer(optimizer, self._user_defined_strategy, fleet=self)
        return self._distributed_optimizer

    def minimize(self, loss: Variable, startup_program: Optional[Program] = None,
                 parameter_list: Optional[Sequence[Any]] = None,
                 no_grad_set: Optional[Set[Any]] = None
                 ) -> Tuple[List[Operator], List[Tuple[Parameter, Variable]]]:
        """``distributed_optimizer(...).minimize(...)``: returns ``(optimize_ops, params_grads)``."""
        rm = self._rm()
        if isinstance(loss, list):
            if rm._is_non_distributed() or self._is_collective:
                raise InvalidArgument("loss can be list only in PS mode")
            raise Unimplemented("minimizing a list of losses is not supported by refimpl (Paddle allows it in "
                                "parameter-server mode only)")
        if self._distributed_optimizer is None:
            raise Unimplemented('Class "Optimizer" cannot be used directly as an optimizer, please use its '
                                'subclasses such as "Adam" (call fleet.distributed_optimizer(optimizer) '
                                'before fleet.minimize)')
        return self._distributed_optimizer.minimize(loss, startup_program, parameter_list, no_grad_set)

    def amp_init(self, place: Any, scope: Any = None, test_program: Any = None,
                 use_fp16_test: bool = False) -> Any:
        """Cast the fp32 parameters of an AMP (pure fp16) program after the startup ran (Paddle's ``amp_init``)."""
        if self._distributed_optimizer is None:
            raise PreconditionNotMet("amp_init: call fleet.distributed_optimizer(...) and minimize first")
        return self._distributed_optimizer.amp_init(place, scope, test_program, use_fp16_test)

    def _report(self, key, empty, name):
        """``self._context[key]`` (Paddle's place), else the DistributedOptimizer's own ``name()`` report."""
        if key in self._context:
            return self._context[key]
        getter = getattr(self._distributed_optimizer, name, None)
        if getter is not None:
            try:
                return getter()
            except InvalidArgument:  # not minimized yet
                pass
        logger.warning("You may need to call minimize function before %s is called", name)
        return empty

    def _final_strategy(self):
        return self._report("valid_strategy", {}, "_final_strategy")

    def _get_applied_meta_list(self):
        return self._report("applied_meta_list", [], "_get_applied_meta_list")

    def _get_applied_graph_list(self):
        return self._report("applied_graph_list", [], "_get_applied_graph_list")


#: the module-level instance (``paddle.distributed.fleet.fleet``); its methods are the module functions
fleet = Fleet()

__all__ = ["Fleet", "fleet", "set_log_level", "get_log_level_code", "get_log_level_name"]
