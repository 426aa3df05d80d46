"""``StrategyCompiler``: which of the applicable meta-optimizers run, and in what nesting.

Mirrors ``paddle/distributed/fleet/base/strategy_compiler.py`` of Paddle
3.3.1. Meta-optimizer ``a`` may wrap ``b`` when ``type(b).__name__`` is in
``a.meta_optimizers_white_list`` (``a._can_update(b)``). Among the
applicable ones, the compiler takes the longest chain of such wraps
(:func:`longest_chain`: the chain Paddle's Floyd-style search keeps, found
here by a memoised recursion over the same rule; with no edge at all, the
first candidate alone), links the chain through ``_update_inner_optimizer`` and
returns its head. The candidates left out have their switch turned off in
the valid strategy (``_get_valid_strategy``), which is what
``fleet._final_strategy()`` shows. The graph-optimizer slot works the same
way; Paddle 3.3.1 has no graph optimizer any more, so its list is empty.
"""
from __future__ import annotations

import copy
from functools import lru_cache
from typing import Any, Callable, List, Optional, Sequence, Tuple

from refimpl.core.errors import InvalidArgument


def create_graph(optimizer_list: Sequence[Any]) -> Tuple[List[List[int]], List[int]]:
    """Adjacency matrix (``edge[i][j] = 1``: ``i`` can wrap ``j``) and in-degrees."""
    n = len(optimizer_list)
    edge = [[0] * n for _ in range(n)]
    indegree = [0] * n
    for i, a in enumerate(optimizer_list):
        for j, b in enumerate(optimizer_list):
            if a._can_update(b):
                edge[i][j] = 1
                indegree[j] += 1
    return edge, indegree


def topo_sort(edge: List[List[int]], indegree: List[int]) -> List[int]:
    """A topological order; a cycle of white lists is an error (Paddle asserts)."""
    n, indegree = len(indegree), list(indegree)
    order = []
    for _ in range(n):
        j = next((j for j in range(n) if indegree[j] == 0), None)
        if j is None:
            raise InvalidArgument("The combination of meta optimizers contains ring")
        order.append(j)
        indegree[j] = -1
        for k in range(n):
            if edge[j][k]:
                indegree[k] -= 1
    return order


def longest_chain(n: int, can_wrap: Callable[[int, int], bool]) -> List[int]:
    """The indices of the wrap chain Paddle's compiler picks among ``n`` candidates.

    ``via(i, j, k)`` is the longest chain from ``i`` to ``j`` whose inner
    members are all below ``k``, where a chain through ``m`` counts only if
    ``i`` may wrap ``j`` directly as well as ``i -> m`` and ``m -> j`` (the
    rule of Paddle's ``floyd``; a longer chain must be strictly longer to win).
    Paddle keeps the chain improved last when scanning ``m`` upward and pairs
    in row order, so the search runs that scan backwards and stops at the
    first improvement; with none, the first allowed pair; with no pair at
    all, the first candidate alone. Checked equal to Paddle's ``floyd`` on
    every subset of the factory's classes.
    """
    @lru_cache(maxsize=None)
    def via(i: int, j: int, k: int) -> Tuple[int, ...]:
        if k == 0:
            return (i, j)
        without, mid = via(i, j, k - 1), k - 1
        if not (can_wrap(i, mid) and can_wrap(mid, j)):
            return without
        through = via(i, mid, k - 1) + via(mid, j, k - 1)[1:]
        return through if len(through) > len(without) else without

    pairs = [(i, j) for i in range(n) for j in range(n) if can_wrap(i, j)]
    if not pairs:
        return [0]
    for k in range(n, 0, -1):
        for i, j in reversed(pairs):
            if len(via(i, j, k)) > len(via(i, j, k - 1)):
                return list(via(i, j, k))
    return list(pairs[0])


def maximum_path_len_algo(optimizer_list: Sequence[Any]) -> Optional[List[Any]]:
    """The chosen chain, outermost first, each wrapping the next (None for no candidates)."""
    if not optimizer_list:
        return None
    edge, indegree = create_graph(optimizer_list)
    topo_sort(edge, indegree)
    chain = [optimizer_list[i] for i in longest_chain(len(optimizer_list), lambda i, j: edge[i][j] == 1)]
    for outer, inner in zip(chain, chain[1:]):
        outer._update_inner_optimizer(inner)
    return chain


class StrategyCompilerBase:
    pass


class StrategyCompiler(StrategyCompilerBase):
    """Chooses the meta-optimizer chain and the graph optimizer of a strategy (see the module docstring)."""

    def __init__(self) -> None:
        self._meta_optimizers: List[Any] = []
        self._graph_optimizers: List[Any] = []
        self._valid_optimizer_list = None
        self._user_defined_strategy = None
        self._meta_optimizer_candidates: List[Any] = []
        self._graph_optimizer_candidates: List[Any] = []

    def _get_applied_meta_optimizer(self) -> List[Any]:
        return self._meta_optimizers

    def _get_applied_meta_list(self) -> List[str]:
        return [type(opt).__name__ for opt in self._meta_optimizers]

    def _get_applied_graph_list(self) -> List[str]:
        return [type(opt).__name__ for opt in self._graph_optimizers]

    def _get_valid_strategy(self, dist_strategy: Any, can_not_apply_optimizer_list: Sequence[Any]) -> Any:
        """A copy of ``dist_strategy`` with the switches of every meta-optimizer not applied turned off."""
        valid = copy.deepcopy(dist_strategy)
        applied = {type(opt).__name__ for opt in self._meta_optimizers}
        for opt in self._meta_optimizer_candidates:
            if type(opt).__name__ not in applied:
                opt._disable_strategy(valid)
        for opt in can_not_apply_optimizer_list:
            opt._disable_strategy(valid)
        return valid

    def generate_optimizer(self, loss: Any, role_maker: Any, optimizer: Any, user_defined_strategy: Any,
                           meta_optimizer_list: Sequence[Any], graph_optimizer_list: Sequence[Any]
                           ) -> Tuple[Any, Any]:
        """(outermost meta-optimizer or ``optimizer`` when there is none, graph optimizer or None)."""
        self._user_defined_strategy = user_defined_strategy
        self._meta_optimizer_candidates = list(meta_optimizer_list)
        self._graph_optimizer_candidates = list(graph_optimizer_list)
        if not meta_optimizer_list and not graph_optimizer_list:
            return optimizer, None
        metas = maximum_path_len_algo(meta_optimizer_list)
        graphs = maximum_path_len_algo(graph_optimizer_list)
        self._meta_optimizers = metas or []
        self._graph_optimizers = graphs or []
        head = metas[0] if metas else None
        graph = graphs[0] if graphs else None
        if metas is None or graphs is None:
            return head, graph
        # a graph optimizer black-listed by any chosen meta-optimizer is dropped
        if any(type(g).__name__ in m.meta_optimizers_black_list for g in graphs for m in metas):
            graph = None
        return head, graph


__all__: list = []
