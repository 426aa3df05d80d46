"""``StrategyCompiler``: which of the applicable meta-optimizers run, and in what nesting.

Mirrors ``paddle/distributed/fleet/base/strategy_compiler.py`` of Paddle
3.3.1. Meta-optimizer ``a`` may wrap ``b`` when ``type(b).__name__`` is in
``a.meta_optimizers_white_list`` (``a._can_update(b)``). Among the
applicable ones, the compiler takes the longest chain of such wraps
(:func:`maximum_path_len_algo`: Paddle's Floyd-style longest path over that
graph, ties going to the first found; with no edge at all, the first
candidate alone), links the chain through ``_update_inner_optimizer`` and
returns its head. The candidates left out have their switch turned off in
the valid strategy (``_get_valid_strategy``), which is what
``fleet._final_strategy()`` shows. The graph-optimizer slot works the same
way; Paddle 3.3.1 has no graph optimizer any more, so its list is empty.
"""
from __future__ import annotations

import copy
from typing import Any, List, Optional, Sequence, Tuple

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


def floyd(edge: List[List[int]]) -> List[int]:
    """The indices of the longest wrap chain, as Paddle's ``floyd`` finds it (``edge`` is updated)."""
    n = len(edge)
    best_len, best = -1, (-1, -1)
    path: List[List[List[int]]] = [[[] for _ in range(n)] for _ in range(n)]
    for i in range(n):
        for j in range(n):
            if edge[i][j] > 0:
                path[i][j] = [j]
                if edge[i][j] > best_len:
                    best_len, best = edge[i][j], (i, j)
    for k in range(n):
        for i in range(n):
            for j in range(n):
                # i -> k -> j lengthens i -> j only where i -> j itself is allowed
                if edge[i][j] == 0 or edge[i][k] == 0 or edge[k][j] == 0:
                    continue
                if edge[i][j] < edge[i][k] + edge[k][j]:
                    edge[i][j] = edge[i][k] + edge[k][j]
                    path[i][j] = path[i][k] + path[k][j]
                    best_len, best = edge[i][j], (i, j)
    if best_len == -1:
        return [0]
    return [best[0]] + path[best[0]][best[1]]


def maximum_path_len_algo(optimizer_list: Sequence[Any]) -> Optional[List[Any]]:
    """The chosen chain, outermost first, each wrapping the next (None for no candidates)."""
    if not optimizer_list:
        return None
    edge, indegree = create_graph(optimizer_list)
    topo_sort(edge, indegree)
    chain = [optimizer_list[i] for i in floyd(edge)]
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
