"""The parameter-server environment of ``PaddleCloudRoleMaker(is_collective=False)``.

Mirrors ``PaddleCloudRoleMaker._ps_env`` of Paddle 3.3.1: the role
(``TRAINING_ROLE``: TRAINER, PSERVER, HETER_TRAINER or COORDINATOR), the
server list (``PADDLE_PSERVERS_IP_PORT_LIST``; without it the job falls back
to one non-distributed worker), the trainer count and id, this process's
endpoint (``POD_IP:PADDLE_PORT``), the coordinator endpoints, and the heter
pipeline stages (``PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST``, ``STAGE_ID`` ...).
The attributes are set in Paddle's order, so a failure leaves the same
partial state. refimpl only reads this environment; it runs no servers.

Differences: errors are ``InvalidArgument`` (a ``ValueError``, as in Paddle)
or ``InvalidArgumentAssertion`` (also an ``AssertionError``) naming the
variable; an XPU heter worker's device is ``xpu:<FLAGS_selected_xpus>``
(Paddle compares the device instead of its type and leaves ``cpu``); the
prints go to the ``refimpl.distributed.fleet`` logger.
"""
from __future__ import annotations

import logging
import os
import re
from typing import TYPE_CHECKING

from refimpl.core.errors import InvalidArgument

from .compat_errors import InvalidArgumentAssertion

if TYPE_CHECKING:
    from .role_maker import PaddleCloudRoleMaker

logger = logging.getLogger("refimpl.distributed.fleet")
TRAINING_ROLES = ("TRAINER", "PSERVER", "HETER_TRAINER", "COORDINATOR")


def _required(name):
    value = os.getenv(name)
    if value is None:
        raise InvalidArgument(f"Can not find {name}, please check your environment.")
    return value


def _endpoint():
    port = _required("PADDLE_PORT")
    return ":".join([_required("POD_IP"), port])


def _stages(rm):
    from .role_maker import env_int
    rm._stage_id = env_int("STAGE_ID", _required("STAGE_ID"))
    rm._stage_num = env_int("STAGE_NUM", _required("STAGE_NUM"))
    rm._stage_trainers = tuple(int(x) for x in re.findall(r"\d+", _required("PADDLE_STAGE_TRAINERS_NUM")))


def parse_ps_env(rm: PaddleCloudRoleMaker) -> None:
    """Fill the role maker ``rm`` from the parameter-server environment."""
    from .role_maker import Role, env_int, getenv_or_backup
    servers = os.getenv("PADDLE_PSERVERS_IP_PORT_LIST")
    if servers is None:  # no launcher: one non-distributed worker
        rm._server_endpoints, rm._trainers_num, rm._role, rm._current_id = "", 1, Role.WORKER, 0
        rm._nodes_num, rm._heter_trainers_num, rm._heter_trainer_endpoints = 1, 0, None
        rm._non_distributed = True
        return
    rm._server_endpoints = servers.split(",")
    workers = getenv_or_backup("PADDLE_TRAINER_ENDPOINTS")
    rm._worker_endpoints = workers.split(",") if workers is not None else []
    coordinators = os.getenv("PADDLE_COORDINATOR_ENDPOINTS", "")
    rm._coordinator_endpoints = coordinators
    if coordinators == "":
        logger.info("fl-ps > coordinator address is null!")
    else:
        rm._with_coordinator = True
        rm._coordinator_endpoints = coordinators.split(",")
    trainers_num = env_int("PADDLE_TRAINERS_NUM", _required("PADDLE_TRAINERS_NUM"))
    role_name = os.getenv("TRAINING_ROLE")
    if role_name is None:
        raise InvalidArgument("Can not find TRAINING_ROLE, please check your environment.")
    if role_name not in TRAINING_ROLES:
        raise InvalidArgument(f"TRAINING_ROLE must be PSERVER or TRAINER or HETER_TRAINER or COORDINATOR, "
                              f"but get {role_name}, please check your environment.")
    all_heter = os.getenv("PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST", "")
    if all_heter != "":
        _heter_lists(rm, role_name, all_heter)
    else:
        rm._is_heter_parameter_server_mode, rm._heter_trainers_num = False, 0

    if role_name == "TRAINER":
        role = Role.WORKER
        current_id = env_int("PADDLE_TRAINER_ID", _required("PADDLE_TRAINER_ID"))
        if rm._is_heter_parameter_server_mode:
            _stages(rm)
        rm._cur_endpoint = _endpoint()
    elif role_name == "COORDINATOR":
        logger.info(">>> curr node is coordinator!")
        role = Role.COORDINATOR
        current_id = env_int("PADDLE_TRAINER_ID", os.getenv("PADDLE_TRAINER_ID", "0"))
    elif role_name == "PSERVER":
        role = Role.SERVER
        rm._cur_endpoint = _endpoint()
        if rm._cur_endpoint not in rm._server_endpoints:
            raise InvalidArgument(f"'{rm._cur_endpoint}' is not in list PADDLE_PSERVERS_IP_PORT_LIST="
                                  f"{rm._server_endpoints} (this server's POD_IP:PADDLE_PORT)")
        current_id = rm._server_endpoints.index(rm._cur_endpoint)
    else:  # HETER_TRAINER
        role = Role.HETER_WORKER
        _stages(rm)
        device_type = _required("HETER_DEVICE_TYPE")
        rm._heter_trainer_device_type = device_type
        if device_type not in ("cpu", "gpu", "xpu"):
            raise InvalidArgumentAssertion(f"HETER_DEVICE_TYPE should be cpu,gpu or xpu, got {device_type!r}")
        if device_type != "cpu":
            flag = "FLAGS_selected_gpus" if device_type == "gpu" else "FLAGS_selected_xpus"
            rm._heter_trainer_device = f"{device_type}:{os.getenv(flag, '0')}"
        rm._cur_endpoint = _endpoint()
        heter = all_heter.split(",")
        if rm._cur_endpoint not in heter:
            raise InvalidArgument(f"'{rm._cur_endpoint}' is not in list PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST={heter}")
        current_id = heter.index(rm._cur_endpoint) + trainers_num

    rm._trainers_num, rm._role, rm._current_id = trainers_num, role, current_id
    rm._nodes_num = len({e.split(":")[0] for e in rm._worker_endpoints})


def _heter_lists(rm, role_name, all_heter):
    rm._heter_trainer_endpoints = all_heter.split(",")
    rm._is_heter_parameter_server_mode = True
    rm._heter_trainers_num = len(rm._heter_trainer_endpoints)
    previous = os.getenv("PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST", "")
    if previous == "":
        if role_name not in ("TRAINER", "PSERVER"):
            raise InvalidArgumentAssertion("training_role should be trainer or pserver (a heter trainer needs "
                                           "PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST)")
    else:
        rm._previous_heter_trainer_endpoints = previous.split(",")
    following = os.getenv("PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST", "")
    if following == "":
        if role_name not in ("HETER_TRAINER", "PSERVER"):
            raise InvalidArgumentAssertion("training_role should be heter trainer or pserver (a trainer of a "
                                           "heter job needs PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST)")
    else:
        rm._next_heter_trainer_endpoints = following.split(",")
