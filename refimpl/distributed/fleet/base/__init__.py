"""``paddle.distributed.fleet.base``: the building blocks of fleet.

* ``role_maker`` (who this process is; ``ps_role_env`` reads the
  parameter-server environment) and ``mpi_role_maker`` (refimpl's role maker
  for MPI and in-process ranks);
* ``distributed_strategy`` (what to do), with ``strategy_schema``,
  ``strategy_message`` and ``ps_table_configs`` behind it;
* ``topology`` (how ranks are arranged into parallel groups);
* ``util_factory`` (``fleet.util``'s ``UtilBase``), ``worker_comm`` (the role
  makers' barrier / all-reduce / all-gather) and ``runtime_factory`` (the
  runtime-handler checks of the parameter-server methods);
* ``compat_errors`` (typed errors that are also Paddle's builtin exceptions).
"""
from . import util_factory  # noqa: E402,F401  (fleet.base.util_factory.UtilFactory, as in Paddle)
