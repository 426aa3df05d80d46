"""Parameter-server ops of a worker program: ``ps_send``, ``ps_recv``, ``ps_geo``.

Mirror Paddle's ``send`` / ``recv`` ops of the parameter-server transpiler
(and, for GEO, the work of its ``GeoCommunicator``): ordinary ops whose
kernels talk to the servers through the PS runtime of the rank running
them (``refimpl.distributed.ps.runtime``), so the executor knows nothing
about servers.

* ``ps_send``: ``X`` (the gradients of ``param_names``, same order) pushed
  to the servers holding their blocks;
* ``ps_recv``: ``Out`` (the parameters) pulled from the servers; in sync mode
  the pull returns once every worker's gradient of the step was applied;
* ``ps_geo``: ``Param`` -> ``ParamOut``: every ``k_steps`` runs, push the
  deltas since the last sync and merge the servers' values.

Differences: attrs are refimpl's (``param_names``, ``k_steps``), not the
table / endpoint attrs of Paddle's ops.
"""
from .registry import register_op

_ATTRS = {"param_names": []}


def _client(what):
    from refimpl.distributed.ps.runtime import client_of_current_rank
    return client_of_current_rank(what)


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
