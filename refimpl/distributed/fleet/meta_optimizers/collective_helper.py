"""``CollectiveHelper._init_communicator``: the startup ops that bring up one ring.

Mirrors ``paddle/distributed/fleet/meta_optimizers/common.py`` of Paddle
3.3.1 (the CUDA branch): a persistable RAW variable ``comm_id_N``,
``c_gen_nccl_id`` (this rank's endpoint, the others') writing it,
``c_comm_init`` reading it, then, when ``sync``, a barrier made of
``fill_constant`` -> ``all_reduce`` on the global ring ->
``c_sync_calc_stream`` on a fresh ``sync_var_N``. With no endpoint only
the barrier is appended. refimpl's ``c_gen_nccl_id`` / ``c_comm_init``
kernels bootstrap refimpl's communicators (see
``refimpl/ops/collective_ops.py``), so the program runs as it reads.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from refimpl.core.dtypes import to_vartype
from refimpl.core.reduce_op import ReduceOp
from refimpl.framework import unique_name
from refimpl.framework.op_role import OP_ROLE_ATTR, OpRole


def _add_sync_by_allreduce(block: Any, global_ring_id: Optional[int]) -> None:
    sync_var = block.create_var(name=unique_name.generate("sync_var"), dtype="int32", persistable=False,
                                stop_gradient=True)
    block.append_op(type="fill_constant", inputs={}, outputs={"Out": [sync_var]},
                    attrs={"shape": [1], "dtype": to_vartype("int32"), "value": 1, "force_cpu": False,
                           OP_ROLE_ATTR: OpRole.Forward})
    block.append_op(type="all_reduce", inputs={"x": [sync_var]}, outputs={"out": [sync_var]},
                    attrs={"ring_id": global_ring_id, "reduce_type": ReduceOp.SUM, OP_ROLE_ATTR: OpRole.Forward})
    block.append_op(type="c_sync_calc_stream", inputs={"X": sync_var}, outputs={"Out": sync_var},
                    attrs={OP_ROLE_ATTR: OpRole.Forward})


def init_communicator(program: Any, current_endpoint: Optional[str], endpoints: Optional[Sequence[str]],
                      rank: Optional[int], ring_id: Optional[int], global_ring_id: Optional[int] = None,
                      sync: bool = True) -> None:
    """Append ring ``ring_id``'s bring-up to ``program`` (Paddle's ``_init_communicator``, CUDA build)."""
    block = program.global_block()
    if current_endpoint is None:
        _add_sync_by_allreduce(block, global_ring_id)
        return
    endpoints = list(endpoints or [])
    others = [e for e in endpoints if e != current_endpoint]
    comm_id = block.create_var(name=unique_name.generate("comm_id"), persistable=True, type="RAW")
    block.append_op(type="c_gen_nccl_id", inputs={}, outputs={"Out": comm_id},
                    attrs={"rank": rank, "endpoint": current_endpoint, "other_endpoints": others,
                           "ring_id": ring_id, OP_ROLE_ATTR: OpRole.Forward})
    block.append_op(type="c_comm_init", inputs={"X": comm_id}, outputs={},
                    attrs={"nranks": len(endpoints), "rank": rank, "ring_id": ring_id,
                           "endpoints": ",".join(endpoints), OP_ROLE_ATTR: OpRole.Forward})
    if sync:
        _add_sync_by_allreduce(block, global_ring_id)


def broadcast_params(startup: Any, ring_id: int, by_name: bool = True, skip_distributed: bool = True) -> None:
    """``broadcast`` of the parameters from root 0 over ``ring_id``, then one ``c_sync_comm_stream``
    naming the last parameter (broadcast or not, as Paddle).

    ``by_name``: in name order, the order Paddle 3.3.1's startup block lists them in for
    ``RawProgramOptimizer`` (recorded: ``fc_0.b_0`` before ``fc_0.w_0``); else in creation order
    (``TensorParallelOptimizer``). ``skip_distributed``: tensor-parallel shards stay each rank's own.
    """
    block = startup.global_block()
    params = list(block.iter_parameters())
    param = None
    for param in sorted(params, key=lambda p: p.name) if by_name else params:
        if skip_distributed and param.is_distributed:
            continue
        block.append_op(type="broadcast", inputs={"x": param}, outputs={"out": param},
                        attrs={"ring_id": ring_id, "root": 0, OP_ROLE_ATTR: OpRole.Forward})
    if param is None:
        return
    block.append_op(type="c_sync_comm_stream", inputs={"X": param}, outputs={"Out": param},
                    attrs={"ring_id": ring_id, OP_ROLE_ATTR: OpRole.Forward})


__all__: list = []
