"""The startup ops of fleet's collective programs: ``c_gen_nccl_id``, ``c_comm_init``; and ``depend``.

Mirrors Paddle's ``c_gen_nccl_id_op.cc`` / ``c_comm_init_op.cc`` /
``depend_op.cc`` (slots, attrs and defaults of Paddle 3.3.1), the ops
``CollectiveHelper._init_communicator`` (``meta_optimizers/common.py``)
appends to a startup program to bring up a ring. Paddle's
``c_gen_nccl_id`` makes an NCCL unique id on rank 0 and sends it to the
other endpoints, and ``c_comm_init`` builds the communicator from it. In
refimpl the rank context already holds the communicators of its world
(in-process threads, MPI or NCCL, ``refimpl.distributed.communication``),
so ``c_gen_nccl_id`` writes a small id ``[ring_id, nranks]`` into its RAW
variable and ``c_comm_init`` checks that ring ``ring_id`` exists with
``nranks`` ranks and this one at ``rank`` — creating it over the whole world
when it is missing and ``nranks`` is the world size, binding it back to the
world when a program of the whole world follows one that bound the ring id
to a smaller group (``RankContext.bind_ring``) — and raises
PreconditionNotMet naming the ring otherwise. ``depend`` (X, Dep -> Out = X)
only orders ops. Imported by ``collective_ops``.
"""
import numpy as np

from refimpl.core import comm_context
from refimpl.core.errors import PreconditionNotMet

from .common import same_as
from .registry import register_op


@register_op("c_gen_nccl_id", [], ["Out"], {"endpoint": "", "other_endpoints": [], "rank": 0, "ring_id": 0},
             infer_shape=lambda ins, attrs: {})
def c_gen_nccl_id(*, endpoint, other_endpoints, rank, ring_id):
    """refimpl's communicator id of ring ``ring_id``: ``[ring_id, nranks]`` (see the module docstring)."""
    return np.array([ring_id, 1 + len(other_endpoints)], dtype=np.int64)


def _ring_for(ring_id, nranks):
    """This rank's communicator of ``ring_id``; made over the whole world when missing and ``nranks`` fits."""
    ctx = comm_context.current()
    comm = ctx.comms.get(ring_id)
    groups = getattr(ctx, "groups", None)  # a RankContext's groups (a stand-in context may have none)
    if comm is None and groups is not None and ring_id not in groups and getattr(ctx, "world_size", 0) == nranks:
        comm = ctx.add_group(ring_id, range(nranks))  # type: ignore[attr-defined]
    if comm is None:
        raise PreconditionNotMet(f"c_comm_init: rank {ctx.rank} has no communicator for ring_id {ring_id} "
                                 f"({nranks} ranks); refimpl creates a ring of the whole world itself, any "
                                 f"other ring with new_group on every rank first")
    return comm


@register_op("c_comm_init", ["X"], [], {"nranks": 1, "rank": 0, "device_id": -1, "ring_id": 0, "endpoints": ""},
             infer_shape=lambda ins, attrs: {})
def c_comm_init(X, *, nranks, rank, device_id, ring_id, endpoints):
    """Check (or create) ring ``ring_id``: ``nranks`` ranks, this one at ``rank``."""
    if X is not None and len(X) == 2 and (int(X[0]), int(X[1])) != (ring_id, nranks):
        raise PreconditionNotMet(f"c_comm_init: the comm id is for ring {int(X[0])} of {int(X[1])} ranks, but "
                                 f"the op initializes ring {ring_id} of {nranks} ranks")
    comm = _ring_for(ring_id, nranks)
    ctx = comm_context.current()
    if (comm.nranks, comm.rank) != (nranks, rank) and (nranks, rank) == (getattr(ctx, "world_size", 0), ctx.rank):
        ctx.bind_world(ring_id)  # type: ignore[attr-defined]  # a program of the whole world after a ring rebinding
        comm = ctx.comm(ring_id)
    if (comm.nranks, comm.rank) != (nranks, rank):
        raise PreconditionNotMet(f"c_comm_init: ring_id {ring_id} has {comm.nranks} ranks with this one at rank "
                                 f"{comm.rank}, but the op says nranks={nranks}, rank={rank}")
    return ()


@register_op("depend", ["X", "Dep*"], ["Out"], {}, infer_shape=same_as("X", "Out"), writes_inputs=True)
def depend(X, Dep):
    """Out = X; the op only orders ``X`` after ``Dep`` (Paddle's ``depend``)."""
    return X
