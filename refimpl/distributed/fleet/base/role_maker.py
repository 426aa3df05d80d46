"""Role makers: which role (worker, server ...) this process plays, and its peers.

Mirrors ``paddle/distributed/fleet/base/role_maker.py`` of Paddle 3.3.1:
``Role``, ``RoleMakerBase``, ``PaddleCloudRoleMaker`` (the role from the
``PADDLE_*`` environment a launcher sets: collective or parameter-server)
and ``UserDefinedRoleMaker`` (the role from arguments). The role is worked
out lazily, on the first accessor call (or ``_generate_role()``), and the
accessors (``_worker_index``, ``_worker_num``, ``_is_first_worker``,
``_get_trainer_endpoints`` ...) answer as Paddle's do, including Paddle's
quirks that are answers rather than crashes (a collective
``UserDefinedRoleMaker`` is not ``_is_worker()``; a parameter-server job
without ``PADDLE_PSERVERS_IP_PORT_LIST`` has pserver endpoints ``""``).

Differences:

* Where Paddle fails with an internal ``AttributeError`` (an attribute it
  never set), refimpl answers sensibly: ``_heter_worker_num()`` is 0 outside
  heter mode, ``_get_local_rank()`` / ``_get_local_device_ids()`` /
  ``_get_world_device_ids()`` are None when the launcher did not say.
* Errors are typed (``InvalidArgument`` for a bad environment, which is a
  ``ValueError`` as in Paddle; assertion failures are typed errors that are
  also ``AssertionError``) and say what is wrong where Paddle's were empty.
* Gloo is not used: ``_barrier`` / ``_all_reduce`` / ``_all_gather`` run on
  refimpl's communicators (in-process threads or MPI; see ``worker_comm``);
  ``RoleMakerBase``'s own warn and answer None, as Paddle's. The ``PADDLE_WITH_GLOO``
  settings are still checked as Paddle checks them in static mode.
* Paddle's informational prints go to the ``refimpl.distributed.fleet`` logger.
* ``mpi_role_maker.MPIRoleMaker`` (new) is a collective role maker that,
  when the ``PADDLE_*`` variables are absent, takes the rank and size from
  the in-process rank running the code or from MPI.
"""
from __future__ import annotations

import functools
import json
import logging
import os
from typing import Any, Optional

from refimpl.core.errors import InvalidArgument

from .compat_errors import InvalidArgumentAssertion, InvalidArgumentType, PreconditionAssertion
from .ps_role_env import parse_ps_env
from .worker_comm import WorkerComm

logger = logging.getLogger("refimpl.distributed.fleet")
DEFAULT_ENDPOINT = "127.0.0.1:6170"  # Paddle's endpoint for a job started without a launcher


class Role:
    """The roles of a fleet process (same values as Paddle)."""

    WORKER = 1
    SERVER = 2
    HETER_WORKER = 3
    ALL = 4
    COORDINATOR = 5


def getenv_or_backup(name: str, default: Optional[str] = None) -> Optional[str]:
    """``os.environ[name]``, else the value in the JSON file ``PADDLE_BACKUP_ENV_PATH`` names, else ``default``.

    Paddle reads the backup file once per process; refimpl reads it on each
    call, so a changed environment is seen.
    """
    value = os.environ.get(name)
    if value is not None:
        return value
    path = os.environ.get("PADDLE_BACKUP_ENV_PATH")
    if path is None:
        return default
    with open(path) as f:
        return json.load(f).get(name, default)


def env_int(name: str, text: str) -> int:
    """``int(text)`` for an environment variable, naming it when it is not an integer."""
    try:
        return int(text)
    except ValueError as exc:
        raise InvalidArgument(f"{name}={text!r} is not an integer: {exc}") from None


def _in_dynamic_mode():
    from refimpl import in_dynamic_mode
    return in_dynamic_mode()


def _needs_role(method):
    """Generate the role on first use (Paddle's accessors all start this way)."""
    @functools.wraps(method)
    def accessor(self, *args, **kwargs):
        if not self._role_is_generated:
            self._generate_role()
        return method(self, *args, **kwargs)
    return accessor


class RoleMakerBase:
    """The interface of a role maker; subclasses fill in the role."""

    def __init__(self):
        self._worker_endpoints = []
        self._server_endpoints = []
        self._cur_endpoint = ""
        self._role_is_generated = False
        self._role = None
        self._current_id = -1

    def _generate_role(self):
        raise NotImplementedError("Please implement this method in child class")

    _is_worker = _is_server = _is_first_worker = _worker_num = _server_num = _generate_role
    _worker_index = _server_index = _role_id = _node_num = _generate_role

    def _get_trainer_endpoints(self):
        return self._worker_endpoints

    def _get_pserver_endpoints(self):
        return self._server_endpoints

    def to_string(self) -> str:
        return (f"role: {self._role}, current_id: {self._current_id}, worker_endpoints: "
                f"{self._worker_endpoints}, server_endpoints: {self._server_endpoints}")

    # ---- communication: Paddle's base class only warns (and answers None) ----
    def _barrier(self, comm_world="worker"):
        logger.warning("warning: RoleMakerBase does not have barrier worker.")

    def _all_reduce(self, input, mode="sum", comm_world="worker"):
        logger.warning("warning: RoleMakerBase does not have all reduce worker.")

    def _all_gather(self, input, comm_world="worker"):
        logger.warning("warning: RoleMakerBase does not have all gather worker.")


class PaddleCloudRoleMaker(WorkerComm, RoleMakerBase):
    """The role from the environment a launcher sets (``PADDLE_TRAINER_ID``, ``PADDLE_TRAINER_ENDPOINTS`` ...).

    ``is_collective=True``: every process is a worker; without the variables
    the job is a single non-distributed worker. ``is_collective=False``: a
    parameter-server job (``TRAINING_ROLE``, ``PADDLE_PSERVERS_IP_PORT_LIST``,
    ``PADDLE_TRAINERS_NUM``, ``POD_IP``, ``PADDLE_PORT`` ...).
    """

    def __init__(self, is_collective: bool = False, **kwargs: Any) -> None:
        super().__init__()
        self._is_collective = is_collective
        self._non_distributed = False
        self._kwargs = kwargs
        # heter parameter-server settings, and what a collective job leaves unset
        self._stage_id, self._stage_num, self._stage_trainers = 1, 1, []
        self._next_heter_trainer_endpoints, self._previous_heter_trainer_endpoints = [], []
        self._heter_trainer_endpoints, self._heter_trainers_num = [], 0
        self._heter_trainer_device = self._heter_trainer_device_type = "cpu"
        self._is_heter_parameter_server_mode = False
        self._coordinator_endpoints, self._with_coordinator = None, False
        self._local_rank = self._local_device_ids = self._world_device_ids = None
        self._gloo_settings = None

    def _generate_role(self):
        if not self._role_is_generated:
            if self._is_collective:
                self._collective_env()
            else:
                parse_ps_env(self)
            self._role_is_generated = True
            if not _in_dynamic_mode():
                self._gloo_init()

    def _collective_env(self):
        self._current_id = env_int("PADDLE_TRAINER_ID", os.getenv("PADDLE_TRAINER_ID", "0"))
        self._training_role = os.getenv("PADDLE_TRAINING_ROLE", "TRAINER")
        if self._training_role != "TRAINER":
            raise InvalidArgumentAssertion(f"a collective job has only trainers, but PADDLE_TRAINING_ROLE="
                                           f"{self._training_role!r}; use is_collective=False for a "
                                           f"parameter-server job")
        self._role = Role.WORKER
        endpoints = getenv_or_backup("PADDLE_TRAINER_ENDPOINTS")
        self._cur_endpoint = os.getenv("PADDLE_CURRENT_ENDPOINT")
        if endpoints is None:  # started without a launcher: one non-distributed worker
            endpoints = self._cur_endpoint = DEFAULT_ENDPOINT
            self._non_distributed = True
        self._set_workers(endpoints.split(","))
        if os.getenv("PADDLE_AUTO_PARALLEL_CONFIG") is not None:  # the auto tuner says how many
            self._trainers_num = env_int("PADDLE_TRAINERS_NUM", os.getenv("PADDLE_TRAINERS_NUM"))
        self._local_rank = os.getenv("PADDLE_RANK_IN_NODE")
        self._local_device_ids = os.getenv("PADDLE_LOCAL_DEVICE_IDS")
        self._world_device_ids = os.getenv("PADDLE_WORLD_DEVICE_IDS")

    def _set_workers(self, endpoints):
        self._worker_endpoints = endpoints
        self._trainers_num = len(endpoints)
        self._nodes_num = len({e.split(":")[0] for e in endpoints})

    def _gloo_init(self):
        """Check the ``PADDLE_WITH_GLOO`` settings as Paddle does; the communication itself is refimpl's."""
        use_gloo = env_int("PADDLE_WITH_GLOO", os.getenv("PADDLE_WITH_GLOO", "0"))
        if use_gloo not in (1, 2):
            return
        kind = env_int("PADDLE_GLOO_RENDEZVOUS", os.getenv("PADDLE_GLOO_RENDEZVOUS", "0"))
        if kind == 1:
            needed = {n: os.getenv(f"PADDLE_GLOO_FS_{n}", "") for n in ("NAME", "UGI", "PATH")}
        elif kind == 2:
            needed = {"PATH": os.getenv("PADDLE_GLOO_FS_PATH", "")}
        elif kind == 3:
            ep = self._worker_endpoints[0] if self._is_collective else os.getenv("PADDLE_GLOO_HTTP_ENDPOINT", "")
            host, _, port = ep.partition(":")
            needed = {"host": host, "port": port}
        else:
            raise InvalidArgument(f"gloo initialized error, please check arguments: PADDLE_GLOO_RENDEZVOUS="
                                  f"{kind} (1: HDFS, 2: FILE, 3: HTTP)")
        missing = [n for n, v in needed.items() if not v]
        if missing:
            raise InvalidArgument(f"gloo initialized error, please check arguments: the rendezvous needs {missing}")
        self._gloo_settings = {"rendezvous": kind, "need_init_all": use_gloo == 2, **needed}
        logger.info("Gloo settings %s accepted; refimpl communicates through its own communicators",
                    self._gloo_settings)

    # ---- accessors ---------------------------------------------------------------------------
    @_needs_role
    def _is_worker(self):
        return self._role == Role.WORKER

    @_needs_role
    def _is_server(self):
        return self._role == Role.SERVER

    @_needs_role
    def _is_coordinator(self):
        return self._role == Role.COORDINATOR

    @_needs_role
    def _is_heter_worker(self):
        return self._role == Role.HETER_WORKER

    @_needs_role
    def _is_first_worker(self):
        return self._role == Role.WORKER and self._current_id == 0

    @_needs_role
    def _worker_index(self):
        return self._current_id

    _server_index = _role_id = _worker_index

    @_needs_role
    def _worker_num(self):
        return self._trainers_num

    @_needs_role
    def _server_num(self):
        return len(self._server_endpoints) if self._server_endpoints is not None else 0

    @_needs_role
    def _node_num(self):
        return self._nodes_num

    _get_node_num = _node_num

    @_needs_role
    def _heter_worker_num(self):
        return self._heter_trainers_num

    @_needs_role
    def _is_non_distributed(self):
        return self._non_distributed

    @_needs_role
    def _get_local_rank(self):
        return self._local_rank

    @_needs_role
    def _get_local_device_ids(self):
        return self._local_device_ids

    @_needs_role
    def _get_world_device_ids(self):
        return self._world_device_ids

    @_needs_role
    def _get_trainer_endpoints(self):
        return self._worker_endpoints

    @_needs_role
    def _get_pserver_endpoints(self):
        return self._server_endpoints

    @_needs_role
    def _get_coordinator_endpoints(self):
        return self._coordinator_endpoints

    @_needs_role
    def _get_trainer_endpoint(self):
        self._require((Role.WORKER,), "get_trainer_endpoint should be called by trainer")
        return self._cur_endpoint

    @_needs_role
    def _get_heter_worker_endpoints(self):
        if self._heter_trainer_endpoints == []:
            raise PreconditionAssertion("Heter Worker Endpoints Not initialized (this is not a heter "
                                        "parameter-server job: PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST is unset)")
        return self._heter_trainer_endpoints

    @_needs_role
    def _get_heter_worker_endpoint(self):
        self._require((Role.HETER_WORKER,), "_get_heter_worker_endpoint should be invoked by heter worker")
        return self._cur_endpoint

    @_needs_role
    def _get_previous_trainers(self):
        self._require((Role.WORKER, Role.HETER_WORKER),
                      "_get_previous_trainers should be invoked by trainer or heter worker")
        return self._previous_heter_trainer_endpoints

    @_needs_role
    def _get_next_trainers(self):
        self._require((Role.WORKER, Role.HETER_WORKER),
                      "_get_next_trainers should be invoked by trainer or heter worker")
        return self._next_heter_trainer_endpoints

    @_needs_role
    def _get_stage_id(self):
        return self._stage_id

    @_needs_role
    def _get_stage_trainers(self):
        return self._stage_trainers

    @_needs_role
    def _get_num_stage(self):
        return self._stage_num

    @_needs_role
    def _heter_device(self):
        return self._heter_trainer_device

    @_needs_role
    def _heter_device_type(self):
        return self._heter_trainer_device_type

    def _require(self, roles, message):
        if self._role not in roles:
            names = {v: k for k, v in vars(Role).items() if not k.startswith("_")}
            raise PreconditionAssertion(f"{message} (this process's role is {names.get(self._role, self._role)})")


class UserDefinedRoleMaker(PaddleCloudRoleMaker):
    """The role from arguments: ``current_id``, ``role``, ``worker_num``, ``worker_endpoints``, ``server_endpoints``."""

    def __init__(self, is_collective: bool = False, init_gloo: bool = False, **kwargs: Any) -> None:
        super().__init__(is_collective=is_collective, init_gloo=init_gloo, **kwargs)
        self._init_gloo = init_gloo

    def _generate_role(self):
        if not self._role_is_generated:
            if self._is_collective:
                self._user_defined_collective_env()
            else:
                self._user_defined_ps_env()
            self._role_is_generated = True

    def _user_defined_ps_env(self):
        kw = self._kwargs
        self._server_endpoints = kw.get("server_endpoints")
        self._worker_endpoints = kw.get("worker_endpoints", [])
        self._trainers_num = kw.get("worker_num", 0)
        if self._trainers_num == 0:
            if not self._worker_endpoints:
                raise InvalidArgumentAssertion("UserDefinedRoleMaker needs worker_num > 0 or worker_endpoints")
            self._trainers_num = len(self._worker_endpoints)
        self._role = kw.get("role")
        self._current_id = kw.get("current_id")
        if self._role == Role.WORKER and len(self._worker_endpoints) > self._current_id:
            self._cur_endpoint = self._worker_endpoints[self._current_id]
        elif self._role == Role.SERVER:
            self._cur_endpoint = self._server_endpoints[self._current_id]
        self._nodes_num = len({e.split(":")[0] for e in self._worker_endpoints})

    def _user_defined_collective_env(self):
        endpoints = self._kwargs.get("worker_endpoints")
        if endpoints is None:
            raise InvalidArgumentType("UserDefinedRoleMaker(is_collective=True) needs worker_endpoints")
        self._worker_endpoints = endpoints
        self._current_id = self._kwargs.get("current_id")
        self._trainers_num = len(endpoints)
        # as in Paddle: the role goes to _training_role, so _role stays None (_is_worker() is False)
        self._training_role = Role.WORKER
        self._nodes_num = len({e.split(":")[0] for e in endpoints})


__all__ = ["Role", "RoleMakerBase", "PaddleCloudRoleMaker", "UserDefinedRoleMaker", "getenv_or_backup"]
