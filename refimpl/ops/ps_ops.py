"""Parameter-server ops of a worker program: ``ps_send``, ``ps_recv``, ``ps_geo``.

Mirror Paddle's ``send`` / ``recv`` ops of the parameter-server transpiler
(and, for GEO, the work of its ``GeoCommunicator``): ordinary ops whose
kernels talk to the servers through the PS runtime of the rank running
them (``refimpl.distributed.ps.runtime`` installs it in the rank's context,
``refimpl.core.comm_context``), so neither the executor nor these ops import
the PS layer.

* ``ps_send``: ``X`` (the gradients of ``param_names``, same order) pushed
  to the servers holding their blocks;
* ``ps_recv``: ``Out`` (the parameters) pulled from the servers; in sync mode
  the pull returns once every worker's gradient of the step was applied;
* ``ps_geo``: ``Param`` -> ``ParamOut``: every ``k_steps`` runs, push the
  deltas since the last sync and merge the servers' values.

Differences: attrs are refimpl's (``param_names``, ``k_steps``), not the
table / endpoint attrs of Paddle's ops.
"""
from refimpl.core import comm_context
from refimpl.core.errors import PreconditionNotMet

from .registry import register_op

_ATTRS = {"param_names": []}

NO_PS_RUNTIME = ("a parameter-server op ran on a rank without a PS runtime: build the program with "
                 "fleet.distributed_optimizer(...).minimize in PS mode and call fleet.init_worker() first")


def ps_runtime_of_current_rank():
    """The PS runtime the running rank's context holds (``refimpl.distributed.ps.runtime`` puts it there)."""
    rt = getattr(comm_context.current(), "ps_runtime", None)
    if rt is None:
        raise PreconditionNotMet(NO_PS_RUNTIME)
    return rt


def _client(what):
    return ps_runtime_of_current_rank().require_client(what)


@register_op("ps_send", ["X*"], [], _ATTRS)
def ps_send(X, *, param_names):
    _client("ps_send").push_grads(dict(zip(param_names, X)))
    return ()


@register_op("ps_recv", [], ["Out*"], _ATTRS)
def ps_recv(*, param_names):
    got = _client("ps_recv").pull()
    return [got[n] for n in param_names]


@register_op("ps_geo", ["Param*"], ["ParamOut*"], dict(_ATTRS, k_steps=1))
def ps_geo(Param, *, param_names, k_steps):
    out = _client("ps_geo").geo_step(dict(zip(param_names, Param)), k_steps)
    return [out[n] for n in param_names]
