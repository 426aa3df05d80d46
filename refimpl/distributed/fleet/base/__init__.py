"""``paddle.distributed.fleet.base``: the building blocks of fleet.

``role_maker`` (who this process is), ``distributed_strategy`` (what to do;
with ``strategy_schema`` / ``strategy_message`` / ``build_strategy`` behind
it), ``topology`` (how ranks are arranged into parallel groups) and
``compat_errors`` (typed errors that are also Paddle's builtin exceptions).
"""
