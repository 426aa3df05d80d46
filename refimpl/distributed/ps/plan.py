"""Where each parameter lives: the shard plan of a parameter-server job.

Mirrors the dispatch step of Paddle's parameter-server program split (the
old ``DistributeTranspiler``'s ``slice_variable`` + round-robin dispatch and
the "dense tables" of ``the_one_ps``): every trainable parameter is stored on
the servers, small ones whole on one server, large ones (at least
``min_block_size`` elements and at least as many rows as servers) cut by
rows into one block per server. Differences from Paddle: the plan is a plain
object computed identically on every rank from the program alone (sorted by
name, small parameters go to the least-loaded server, ties to the lowest
index), there are no sparse tables and no table ids.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, TYPE_CHECKING, Tuple

from refimpl.core.errors import InvalidArgument

if TYPE_CHECKING:
    import numpy as np
    from refimpl.distributed.fleet.base.distributed_strategy import DistributedStrategy

#: parameters with at least this many elements are split by rows over the servers
MIN_BLOCK_SIZE = 8192


class Block:
    """Rows ``[begin, end)`` of parameter ``param`` (``end`` None: the whole of it), stored on ``server``.

    ``suffix`` is appended to the names of the server's copies of the
    parameter and of its optimizer state (empty for a whole parameter).
    """

    __slots__ = ("param", "server", "begin", "end", "suffix")

    def __init__(self, param: str, server: int, begin: int = 0, end: Optional[int] = None,
                 suffix: str = "") -> None:
        self.param, self.server, self.begin, self.end, self.suffix = param, server, begin, end, suffix

    def rows(self, array: np.ndarray) -> np.ndarray:
        """This block's part of a full-size array."""
        return array if self.end is None else array[self.begin:self.end]

    def __repr__(self):
        where = "" if self.end is None else f"[{self.begin}:{self.end}]"
        return f"Block({self.param}{where} on server {self.server})"


class ShardPlan:
    """The blocks of every trainable parameter over ``server_num`` servers.

    ``params``: ``[(name, shape)]``. ``blocks[name]`` lists a parameter's
    blocks in row order; ``on_server(s)`` lists server ``s``'s blocks in a
    fixed order (the order of every message between workers and ``s``).
    """

    def __init__(self, params: Sequence[Tuple[str, Any]], server_num: int,
                 min_block_size: Optional[int] = None) -> None:
        if server_num < 1:
            raise InvalidArgument(f"a parameter-server job needs at least one server, got {server_num}")
        self.server_num = server_num
        self.min_block_size = MIN_BLOCK_SIZE if min_block_size is None else int(min_block_size)
        self.shapes = {name: tuple(shape) for name, shape in params}
        self.names = sorted(self.shapes)
        self.blocks = {}
        load = [0] * server_num
        for name in self.names:
            shape = self.shapes[name]
            numel = _numel(shape)
            if server_num > 1 and numel >= self.min_block_size and len(shape) >= 1 and shape[0] >= server_num:
                self.blocks[name] = self._split(name, shape)
                for b in self.blocks[name]:
                    load[b.server] += (b.end - b.begin) * numel // shape[0]
            else:
                s = min(range(server_num), key=lambda i: (load[i], i))
                self.blocks[name] = [Block(name, s)]
                load[s] += numel

    def _split(self, name, shape):
        rows, n = shape[0], self.server_num
        bounds = [rows * i // n for i in range(n + 1)]
        return [Block(name, i, bounds[i], bounds[i + 1], f".block{i}") for i in range(n)]

    def on_server(self, server: int) -> List[Block]:
        return [b for name in self.names for b in self.blocks[name] if b.server == server]

    def split(self, name: str, array: np.ndarray) -> Dict[int, np.ndarray]:
        """``{server: part}`` of a full-size array of parameter ``name`` (or of its gradient)."""
        return {b.server: b.rows(array) for b in self.blocks[name]}

    def __repr__(self):
        return f"ShardPlan({[b for n in self.names for b in self.blocks[n]]})"


def _numel(shape):
    n = 1
    for d in shape:
        n *= max(int(d), 0)
    return n


def mode_of(strategy: DistributedStrategy) -> Tuple[str, int]:
    """``"sync"``, ``"async"`` or ``"geo"`` from a DistributedStrategy, and GEO's ``k_steps``."""
    if not strategy.a_sync:
        return "sync", 0
    k = int(strategy.a_sync_configs["k_steps"])
    return ("geo", k) if k > 0 else ("async", 0)
