"""Hybrid-parallel topology: ranks on a grid of parallel axes, and their groups.

Mirrors ``paddle/distributed/fleet/base/topology.py`` of Paddle 3.3.1:

* :class:`CommunicateTopology` lays ``world_size = prod(dims)`` ranks on a
  grid whose axes are named (default ``data, pipe, sharding, sep, context,
  model``), the last axis varying fastest. It answers coordinates
  (``get_coord``, a ``Coordinate`` namedtuple), ranks (``get_rank``), the
  ranks sharing one axis index (``get_axis_list``), the groups that
  communicate along an axis (``get_comm_list``), groups along several fused
  axes (``get_fused_ranks``) and ``get_rank_from_stage``.
* :class:`HybridCommunicateGroup` creates, on every rank and in Paddle's
  order, one communication group per pipe / data / model / sharding (/ sep)
  group of the topology through ``refimpl.distributed.new_group`` (so they
  are real groups of the in-process or MPI communicators), and answers this
  rank's groups, ranks and world sizes (``get_data_parallel_group`` ...),
  ``get_stage_id``, the pipeline neighbours and ``get_parallel_mode``.

Differences: errors are typed and say what is wrong (Paddle mostly asserts
without a message); each is also the builtin Paddle raises. The groups of
``get_fused_ranks`` come in topology order, not in the ``PYTHONHASHSEED``-
dependent order of Paddle's set (the groups are the same). Paddle's
module-wide ``_HYBRID_PARALLEL_GROUP`` is one per rank here
(:func:`get_hybrid_communicate_group`), since in-process ranks share the
module. No NCCL configs; no warm-up all_reduce on the pipe group.
"""
from __future__ import annotations

import collections
import itertools
import logging
import math
import os
from typing import Any, Dict, List, Optional, Sequence, TYPE_CHECKING, Tuple
import weakref

from refimpl.core.errors import InvalidArgument

from .compat_errors import InvalidArgumentAssertion, InvalidArgumentType, OutOfRangeAssertion, PreconditionAssertion

if TYPE_CHECKING:
    from refimpl.distributed.collective import Group

logger = logging.getLogger("refimpl.distributed.fleet")
_HCG_BY_RANK = weakref.WeakKeyDictionary()  # rank context -> its HybridCommunicateGroup


class ParallelMode:
    """The parallelism a hybrid group mainly uses (``paddle.distributed.ParallelMode``)."""

    DATA_PARALLEL = 0
    TENSOR_PARALLEL = 1
    PIPELINE_PARALLEL = 2
    SHARDING_PARALLEL = 3
    SEGMENT_PARALLEL = 4


class CommunicateTopology:
    """``prod(dims)`` ranks on a grid with one named axis per entry of ``hybrid_group_names``."""

    def __init__(self,
                 hybrid_group_names: Sequence[str] = ("data", "pipe", "sharding", "sep", "context", "model"),
                 dims: Sequence[int] = (1, 1, 1, 1, 1, 1)) -> None:
        names, dims = list(hybrid_group_names), list(dims)
        if len(names) != len(dims):
            raise InvalidArgumentType(f"hybrid_group_names {names} and dims {dims} must have the same length; "
                                      f"the axes without a size: {repr(names[len(dims):])[1:-1] or 'none'}")
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise InvalidArgument(f"Encountered duplicate field name: '{dup}' in hybrid_group_names {names}")
        self._parallel_names, self._dims = names, dims
        self.coordinate = collections.namedtuple("Coordinate", names)
        self._world_size = math.prod(dims)
        coords = [self.coordinate(*c) for c in itertools.product(*(range(d) for d in dims))]
        self._coord2rank = {c: r for r, c in enumerate(coords)}
        self._rank2coord = dict(enumerate(coords))

    def get_hybrid_group_names(self) -> List[str]:
        return self._parallel_names

    def _axis(self, name, assertion=False):
        if name not in self._parallel_names:
            cls = InvalidArgumentAssertion if assertion else InvalidArgument
            raise cls(f"'{name}' is not in list: the axes are {self._parallel_names}")
        return self._parallel_names.index(name)

    def get_dim(self, axis_name: str) -> int:
        return self._dims[self._axis(axis_name)]

    def get_dim_size(self, axis_name: str) -> int:
        return self._dims[self._axis(axis_name, assertion=True)]

    def world_size(self) -> int:
        return self._world_size

    def get_rank(self, **coords: int) -> int:
        """The rank at a coordinate given as one keyword per axis (``get_rank(data=0, pipe=1, ...)``)."""
        if len(coords) != len(self._dims):
            raise InvalidArgumentAssertion(f"get_rank needs one coordinate per axis {self._parallel_names}, "
                                           f"got {sorted(coords)}")
        unknown = [k for k in coords if k not in self._parallel_names]
        if unknown:
            raise InvalidArgumentType(f"get_rank: unexpected axis name(s) {unknown} ('{unknown[0]}'); "
                                      f"the axes are {self._parallel_names}")
        key = self.coordinate(**coords)
        if key not in self._coord2rank:
            raise OutOfRangeAssertion(f"coordinate {dict(coords)} is outside the topology "
                                      f"{dict(zip(self._parallel_names, self._dims))}")
        return self._coord2rank[key]

    def get_coord(self, rank: int) -> Any:
        """The ``Coordinate`` (a namedtuple, one field per axis) of ``rank``."""
        if rank not in self._rank2coord:
            raise OutOfRangeAssertion(f"rank {rank} is not in the topology of {self._world_size} ranks")
        return self._rank2coord[rank]

    def get_axis_list(self, axis_name: str, index: int) -> List[int]:
        """The ranks whose coordinate on ``axis_name`` is ``index``, sorted."""
        axis = self._axis(axis_name)
        return sorted(r for c, r in self._coord2rank.items() if c[axis] == index)

    def get_comm_list(self, axis_name: str) -> List[List[int]]:
        """The groups that communicate along ``axis_name``: one list per index of the other axes."""
        axis = self._axis(axis_name, assertion=True)
        others = [i for i in range(len(self._dims)) if i != axis]
        groups = []
        for fixed in itertools.product(*(range(self._dims[i]) for i in others)):
            coord = dict(zip(others, fixed))
            groups.append([self._coord2rank[self.coordinate(*(coord.get(i, j) for i in range(len(self._dims))))]
                           for j in range(self._dims[axis])])
        return groups

    def get_fused_ranks(self, fused_axis: Sequence[str]) -> List[List[int]]:
        """The groups along the axes ``fused_axis`` together (ranks ordered as in ``fused_axis``)."""
        fused = [self._axis(n) for n in fused_axis]
        rest = [i for i in range(len(self._dims)) if self._parallel_names[i] not in fused_axis]
        groups = []
        for fixed in itertools.product(*(range(self._dims[i]) for i in rest)):
            coord = dict(zip(rest, fixed))
            group = []
            for moving in itertools.product(*(range(self._dims[i]) for i in fused)):
                coord.update(zip(fused, moving))
                group.append(self._coord2rank[self.coordinate(*(coord[i] for i in range(len(self._dims))))])
            groups.append(group)
        return groups

    def get_rank_from_stage(self, global_rank: int, **kwargs: int) -> int:
        """The rank at ``global_rank``'s coordinate with the axes in ``kwargs`` replaced."""
        unknown = [k for k in kwargs if k not in self._parallel_names]
        if unknown:
            raise InvalidArgument(f"Got unexpected field names: {unknown}; the axes are {self._parallel_names}")
        return self.get_rank(**self.get_coord(global_rank)._replace(**kwargs)._asdict())

    def __repr__(self):
        return f"CommunicateTopology({dict(zip(self._parallel_names, self._dims))})"


def get_hybrid_communicate_group() -> Optional[HybridCommunicateGroup]:
    """The HybridCommunicateGroup this rank created last (None if none): Paddle's ``_HYBRID_PARALLEL_GROUP``."""
    from refimpl.distributed.communication import context
    return _HCG_BY_RANK.get(context.current())


_AXES = {"data": "_dp_degree", "model": "_mp_degree", "pipe": "_pp_degree", "sharding": "_sharding_degree",
         "sep": "_sep_degree"}


class HybridCommunicateGroup:
    """This rank's communication groups for a hybrid topology; every rank must create it, in the same order."""

    def __init__(self, topology: CommunicateTopology,
                 hybrid_configs: Optional[Dict[str, Any]] = None) -> None:
        from refimpl.distributed import collective
        from refimpl.distributed.communication import context
        self._new_group = collective.new_group
        self.nranks, self.global_rank = collective.get_world_size(), collective.get_rank()
        self._topo = topology
        missing = [a for a in _AXES if a not in topology.get_hybrid_group_names()]
        if missing:
            raise InvalidArgument(f"a hybrid topology needs the axes {list(_AXES)}; {missing} are missing "
                                  f"from {topology.get_hybrid_group_names()}")
        for axis, attr in _AXES.items():
            setattr(self, attr, topology.get_dim(axis))
        coord = topology.get_coord(self.global_rank) if self.global_rank < topology.world_size() else None
        if not self._check_valid_topo():
            raise PreconditionAssertion(
                f"nranks: {self.nranks}, mp_num: {self._mp_degree}, sharding_num: {self._sharding_degree}, "
                f"pp_num: {self._pp_degree}, dp_num: {self._dp_degree}, sep_num: {self._sep_degree} "
                f"(the degrees must multiply to the number of ranks)")
        self._data_parallel_id, self._model_parallel_id = coord.data, coord.model
        self._sharding_parallel_id, self._sep_parallel_id, self.stage_id = coord.sharding, coord.sep, coord.pipe

        self._pp_group, self._pp_comm_group = self._set_comm_group("pipe")
        self._dp_group, self._dp_comm_group = self._set_comm_group("data")
        self._mp_group, self._mp_comm_group = self._set_comm_group("model")
        self._sharding_group, self._sharding_comm_group = self._set_comm_group("sharding")
        self._sep_group = self._sep_comm_group = None
        if self._sep_degree > 1:
            self._sep_group, self._sep_comm_group = self._set_comm_group("sep")
        self._check_group, self._check_comm_group = self._set_check_group("data")
        if self._sharding_degree > 1:
            self.sharding_check_group, self.sharding_check_comm_group = self._set_check_group("sharding")
        if self._sep_degree > 1:
            self._dp_sep_group, self._dp_sep_comm_group = self.create_fuse_group(["data", "sep"])
            self._pp_mp_group, self._pp_mp_comm_group = self.create_fuse_group(["pipe", "model"])

        self.is_first_stage = self.stage_id == 0
        self.is_last_stage = self.stage_id == self._pp_degree - 1
        self._use_four_directions = os.environ.get("PADDLE_USE_FOUR_DIRECTIONS_P2P", "").lower() in ("1", "true")
        if self._pp_degree > 1:
            self._set_p2p_prev_next()
            if self._use_four_directions:
                self._set_four_directions_p2p_group()
        logger.info("HybridParallelInfo: rank_id: %s, mp_degree: %s, sharding_degree: %s, pp_degree: %s, "
                    "dp_degree: %s, sep_degree: %s", self.global_rank, self._mp_degree, self._sharding_degree,
                    self._pp_degree, self._dp_degree, self._sep_degree)
        _HCG_BY_RANK[context.current()] = self

    def get_parallel_mode(self) -> Optional[int]:
        """The ``ParallelMode`` the degrees imply (None when every degree is 1)."""
        pp, mp, sep, sharding, dp = (self._pp_degree, self._mp_degree, self._sep_degree, self._sharding_degree,
                                     self._dp_degree)
        if pp == 1 and mp == 1 and sep == 1 and sharding == 1 and dp > 1:
            return ParallelMode.DATA_PARALLEL
        if pp == 1 and mp == 1 and sep == 1 and sharding > 1:
            return ParallelMode.SHARDING_PARALLEL
        if pp == 1 and mp == 1 and sep > 1:
            return ParallelMode.SEGMENT_PARALLEL
        if pp == 1 and mp > 1:
            return ParallelMode.TENSOR_PARALLEL
        if pp > 1:
            return ParallelMode.PIPELINE_PARALLEL
        return None

    def _check_valid_topo(self):
        return (self._dp_degree * self._mp_degree * self._pp_degree * self._sharding_degree * self._sep_degree
                == self.nranks)

    def _check_sep_exist(self):
        if not self._sep_degree > 1:
            raise PreconditionAssertion("sep not exist (sep_degree is 1)")

    def _mine(self, groups):
        """Create a group for each rank list (on every rank); return this rank's (ranks, group)."""
        mine = None
        for ranks in groups:
            group = self._new_group(ranks)
            if self.global_rank in ranks:
                mine = (ranks, group)
        return mine

    def _set_comm_group(self, parallel_method="data", topo=None):
        groups = (topo or self._topo).get_comm_list(parallel_method)
        mine = self._mine(groups)
        logger.info("Total %d %s comm group(s) create successfully!", len(groups), parallel_method)
        return mine

    def _set_check_group(self, parallel_method="data", topo=None):
        size = (topo or self._topo).get_dim(parallel_method)
        return self._mine([self._topo.get_axis_list(parallel_method, i) for i in range(size)])

    def create_fuse_group(self, fused_strategy_list: Sequence[str]) -> Tuple[Any, Any]:
        """Groups along several axes together; this rank's (ranks, group) (lists if it is in several)."""
        if not fused_strategy_list:
            raise InvalidArgumentAssertion("the length of fused_strategy_list must be greater than 0.")
        groups = sorted(self._topo.get_fused_ranks(fused_strategy_list))
        mine = [(ranks, self._new_group(ranks)) for ranks in groups]
        mine = [m for m in mine if self.global_rank in m[0]]
        if len(mine) == 1:
            return mine[0]
        return [m[0] for m in mine], [m[1] for m in mine]

    def _set_p2p_prev_next(self):
        for ranks in self._topo.get_comm_list("pipe"):
            if self.global_rank in ranks:
                i = ranks.index(self.global_rank)
                self.next_rank, self.prev_rank = ranks[(i + 1) % len(ranks)], ranks[(i - 1) % len(ranks)]

    def _set_four_directions_p2p_group(self):
        self.send_next_group = self.send_prev_group = self.recv_next_group = self.recv_prev_group = None
        for ranks in self._topo.get_comm_list("pipe"):
            for i, cur in enumerate(ranks):
                nxt, prev = ranks[(i + 1) % len(ranks)], ranks[(i - 1) % len(ranks)]
                g = self._new_group([cur, nxt])
                if self.global_rank == cur:
                    self.send_next_group = g
                elif self.global_rank == nxt:
                    self.recv_prev_group = g
                g = self._new_group([prev, cur])
                if self.global_rank == cur:
                    self.send_prev_group = g
                elif self.global_rank == prev:
                    self.recv_next_group = g

    def _get_p2p_next_rank(self):
        if not hasattr(self, "next_rank"):
            raise PreconditionAssertion("next_rank has not been inited (pp_degree is 1)")
        return self.next_rank

    def _get_p2p_prev_rank(self):
        if not hasattr(self, "prev_rank"):
            raise PreconditionAssertion("prev_rank has not been inited (pp_degree is 1)")
        return self.prev_rank

    def get_p2p_groups(self) -> Any:
        if not self._use_four_directions:
            raise PreconditionAssertion("If you want to use four directions p2p group, set the environment "
                                        "variable PADDLE_USE_FOUR_DIRECTIONS_P2P to True.")
        return self.send_next_group, self.send_prev_group, self.recv_next_group, self.recv_prev_group

    # ---- getters ---------------------------------------------------------------------------------
    def topology(self) -> CommunicateTopology:
        return self._topo

    def get_global_rank(self) -> int:
        return self.global_rank

    def get_data_parallel_rank(self) -> int:
        return self._data_parallel_id

    def get_data_parallel_world_size(self) -> int:
        return self._dp_degree

    def get_data_parallel_group(self) -> Group:
        return self._dp_comm_group

    def get_data_parallel_group_src_rank(self) -> int:
        return self._dp_comm_group.ranks[0]

    def get_model_parallel_rank(self) -> int:
        return self._model_parallel_id

    def get_model_parallel_world_size(self) -> int:
        return self._mp_degree

    def get_model_parallel_group(self) -> Group:
        return self._mp_comm_group

    def get_model_parallel_group_src_rank(self) -> int:
        return self._mp_comm_group.ranks[0]

    def get_stage_id(self) -> int:
        return self.stage_id

    def get_pipe_parallel_world_size(self) -> int:
        return self._pp_degree

    def get_pipe_parallel_group(self) -> Group:
        return self._pp_comm_group

    def get_sharding_parallel_rank(self) -> int:
        return self._sharding_parallel_id

    def get_sharding_parallel_world_size(self) -> int:
        return self._sharding_degree

    def get_sharding_parallel_group(self) -> Group:
        return self._sharding_comm_group

    def get_sharding_parallel_group_src_rank(self) -> int:
        return self._sharding_comm_group.ranks[0]

    def get_sep_parallel_rank(self) -> int:
        return self._sep_parallel_id

    def get_sep_parallel_world_size(self) -> int:
        return self._sep_degree

    def get_sep_parallel_group(self) -> Optional[Group]:
        self._check_sep_exist()
        return self._sep_comm_group

    def get_sep_parallel_group_src_rank(self) -> int:
        self._check_sep_exist()
        return self._sep_comm_group.ranks[0]

    def get_dp_sep_parallel_group(self) -> Group:
        self._check_sep_exist()
        return self._dp_sep_comm_group

    def get_pp_mp_parallel_group(self) -> Group:
        self._check_sep_exist()
        return self._pp_mp_comm_group

    def get_check_parallel_group(self, sharding: bool = False) -> Group:
        return self.sharding_check_comm_group if sharding else self._check_comm_group

    def get_rank_from_stage(self, stage_id: int, **kwargs: int) -> int:
        return self._topo.get_rank_from_stage(self.global_rank, pipe=stage_id, **kwargs)

    def get_moe_sharding_parallel_world_size(self) -> int:
        return 0

    def __repr__(self):
        return (f"HybridCommunicateGroup(rank={self.global_rank}, dp={self._dp_degree}, pp={self._pp_degree}, "
                f"mp={self._mp_degree}, sharding={self._sharding_degree}, sep={self._sep_degree})")


__all__ = ["ParallelMode", "CommunicateTopology", "HybridCommunicateGroup", "get_hybrid_communicate_group"]
