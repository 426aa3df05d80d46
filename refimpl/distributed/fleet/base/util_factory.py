"""``fleet.util``: small distributed helpers over the role maker (``UtilBase``, ``UtilFactory``).

Mirrors ``paddle/distributed/fleet/base/util_factory.py`` of Paddle 3.3.1:
``UtilBase`` holds a role maker and a strategy and offers ``all_reduce``,
``barrier``, ``all_gather`` (the role maker's, on the ``worker`` world by
default), ``get_file_shard`` (this worker's contiguous block of a file
list, the first ``len % workers`` blocks one longer), ``print_on_rank`` and
``_set_file_system``; ``UtilFactory._create_util(context)`` makes one from a
context's ``valid_strategy`` and ``role_maker``.

Differences: ``paddle.distributed.fleet.util`` is a :class:`FleetUtil`,
whose role maker and strategy are, until set explicitly, those of the
calling rank's fleet (refimpl's fleet keeps its state per rank; Paddle's
``fleet.init`` / ``minimize`` store them into the one instance). The
program-debugging helpers (``_params_check``, ``_proto_check``,
``_visualize_graphviz``, ``_program_type_trans``) are not provided.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, TYPE_CHECKING, cast

from .compat_errors import InvalidArgumentAssertion, InvalidArgumentType

if TYPE_CHECKING:
    from .distributed_strategy import DistributedStrategy
    from .role_maker import RoleMakerBase

_UNSET = object()


class UtilBase:
    """Distributed helpers answering through ``self.role_maker`` (see the module docstring)."""

    def __init__(self) -> None:
        self.role_maker: Optional[RoleMakerBase] = None
        self.dist_strategy: Optional[DistributedStrategy] = None

    def _set_strategy(self, dist_strategy: Optional[DistributedStrategy]) -> None:
        self.dist_strategy = dist_strategy

    def _set_role_maker(self, role_maker: Optional[RoleMakerBase]) -> None:
        self.role_maker = role_maker

    def _set_file_system(self, fs_client: Any) -> None:
        from ..utils.fs import FS
        if not isinstance(fs_client, FS):
            raise InvalidArgumentAssertion("fs_client must be the instance of paddle.distributed.fleet.utils.FS")
        self.fs_client = fs_client

    def _role(self, attr: str) -> RoleMakerBase:
        """``self.role_maker``; unset, the AttributeError that using None's ``attr`` would raise."""
        role_maker = self.role_maker
        if role_maker is None:
            raise AttributeError(f"'NoneType' object has no attribute {attr!r}")
        return role_maker

    def all_reduce(self, input: Any, mode: str = "sum", comm_world: str = "worker") -> Any:
        """``input`` reduced over ``comm_world`` (``mode``: sum, min or max)."""
        if isinstance(input, tuple):
            input = list(input)
        return self._role("_all_reduce")._all_reduce(input, mode, comm_world)

    def barrier(self, comm_world: str = "worker") -> None:
        """Wait for every member of ``comm_world``."""
        self._role("_barrier")._barrier(comm_world)

    def all_gather(self, input: Any, comm_world: str = "worker") -> Any:
        """Every member's ``input`` (a list; a lone worker gets ``input`` back)."""
        return self._role("_all_gather")._all_gather(input, comm_world)

    def get_file_shard(self, files: List[str]) -> List[str]:
        """This worker's block of ``files``: [a, b, c, d, e] over 2 workers gives [a, b, c] and [d, e]."""
        if not isinstance(files, list):
            raise InvalidArgumentType("files should be a list of file need to be read.")
        role_maker = self._role("_worker_num")
        return _blocks(files, role_maker._worker_num())[role_maker._worker_index()]

    def get_heter_file_shard(self, files: List[str]) -> List[str]:
        """As :meth:`get_file_shard`, for a heter worker (its index counts after the workers')."""
        if not isinstance(files, list):
            raise InvalidArgumentType("files should be a list of file need to be read.")
        role_maker = self._role("_worker_num")
        trainers = role_maker._worker_num()
        return _blocks(files, trainers)[role_maker._worker_index() - trainers]

    def print_on_rank(self, message: str, rank_id: int) -> None:
        """Print ``message`` on worker ``rank_id`` only."""
        if self._role("_worker_index")._worker_index() == rank_id:
            print(message)


def _blocks(files, n):
    size, extra = divmod(len(files), n)
    out, begin = [], 0
    for i in range(n):
        end = begin + size + (1 if i < extra else 0)
        out.append(files[begin:end])
        begin = end
    return out


class FleetUtil(UtilBase):
    """``paddle.distributed.fleet.util``: a ``UtilBase`` that defaults to the calling rank's fleet."""

    def __init__(self, fleet: Any) -> None:
        self._fleet, self._role_maker, self._strategy = fleet, _UNSET, _UNSET

    @property
    def role_maker(self) -> Optional[RoleMakerBase]:
        if self._role_maker is _UNSET:
            return self._fleet.role_maker
        return cast(Optional["RoleMakerBase"], self._role_maker)  # set by the setter below

    @role_maker.setter
    def role_maker(self, role_maker: Optional[RoleMakerBase]) -> None:
        self._role_maker = role_maker

    @property
    def dist_strategy(self) -> Optional[DistributedStrategy]:
        if self._strategy is not _UNSET:
            return cast(Optional["DistributedStrategy"], self._strategy)  # set by the setter below
        return self._fleet.strategy  # after minimize: the strategy it applied (Paddle's)

    @dist_strategy.setter
    def dist_strategy(self, strategy: Optional[DistributedStrategy]) -> None:
        self._strategy = strategy


class UtilFactory:
    """Makes a ``UtilBase`` from a fleet context (``valid_strategy``, ``role_maker``)."""

    def _create_util(self, context: Optional[Dict[str, Any]] = None) -> UtilBase:
        util = UtilBase()
        if context is not None and "valid_strategy" in context:
            util._set_strategy(context["valid_strategy"])
        if context is not None and "role_maker" in context:
            util._set_role_maker(context["role_maker"])
        return util


__all__ = ["UtilBase", "UtilFactory", "FleetUtil"]
