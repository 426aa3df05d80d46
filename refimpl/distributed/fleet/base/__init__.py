"""``paddle.distributed.fleet.base``: the building blocks of fleet.

* ``role_maker`` (who this process is; ``ps_role_env`` reads the
  parameter-server environment) and ``mpi_role_maker`` (refimpl's role maker
  for MPI and in-process ranks);
* ``distributed_strategy`` (what to do), with ``strategy_schema``,
  ``strategy_message`` and ``ps_table_configs`` behind it;
* ``topology`` (how ranks are arranged into parallel groups);
* ``compat_errors`` (typed errors that are also Paddle's builtin exceptions).
"""
