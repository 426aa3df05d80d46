"""Preparing nested blocks: depth first with an explicit stack, each block once, no cycles.

Mirrors what Paddle does for control flow: ``Executor::Prepare``
(``paddle/fluid/framework/executor.cc``) builds an ``ExecutorPrepareContext``
per block, and a ``conditional_block`` op prepares its ``sub_block`` for its
own executor (``paddle/fluid/operators/controlflow/conditional_block_op.cc``),
so the nesting is a C++ recursion. Here every block is prepared before
anything runs: a prepare hook only *asks* for a sub-block
(``PreparedBlock.prepare_sub_block``) and gets one whose steps are filled
in later by :func:`prepare_nested`, which walks the nesting with an explicit
stack, so depth costs no Python frames and the work is one pass over the
blocks and their ops. A block that asks twice for the same sub-block (same
``skip_eager_deletion_vars``) gets one prepared sub-block, and a sub-block
that is the asking block itself or one that encloses it is refused with a
typed error naming the op (it could only recurse forever).

Running stays nested: a ``conditional_block`` runs its sub-block inside its
own runner, as Paddle runs it inside the op, which costs a few Python frames
per level; :func:`make_room_to_run` raises the interpreter's recursion limit
when a prepared program nests deeper than the limit allows (CPython 3.11
runs Python-to-Python calls without growing the C stack).
"""
from __future__ import annotations

import sys
from typing import Any, Dict, List, Optional, Tuple, TYPE_CHECKING

from refimpl.core.errors import InvalidArgument

if TYPE_CHECKING:
    from .prepared import PreparedBlock

# Python frames one level of nesting takes while running (a traced run, 4, is the deepest; with room
# for the error path), and the frames kept free above the stack prepare was called from.
FRAMES_PER_LEVEL = 8
FRAMES_SPARE = 300


class Nesting:
    """The state of one preparation: the chain of blocks being prepared and the deepest nesting seen."""

    def __init__(self) -> None:
        self.chain: Dict[int, None] = {}  # block indices from the root to the block being built, in order
        self.max_depth = 0                # sub-block levels below the root (0: no sub-blocks)

    def check_not_enclosing(self, asking: "PreparedBlock", op_index: int, sub_idx: int) -> None:
        """Refuse a sub-block that is the asking block or one of the blocks enclosing it."""
        if sub_idx not in self.chain:
            return
        op = asking.block.ops[op_index]
        which = "itself" if sub_idx == asking.block.idx else f"block {sub_idx}, which encloses it"
        path = " -> ".join(str(b) for b in self.chain)
        raise InvalidArgument(f"block {asking.block.idx} op {op_index} ({op.type}): its sub-block is {which} "
                              f"(nesting {path} -> {sub_idx}); a block cannot run inside itself")


def prepare_nested(root: "PreparedBlock", build_args: Tuple[Any, ...]) -> int:
    """Build ``root`` with ``build_args``, then every sub-block its ops ask for, depth first.

    Each block's ``_build`` queues the sub-blocks its ops ask for in
    ``_requested`` (as ``(sub-block, build args)``); they are built after it,
    in op order, each followed by its own. A block leaves the chain once all
    of its sub-blocks are built. Returns the deepest nesting (0: none).
    """
    nesting = root._nesting
    stack: List[Any] = [(root, build_args)]
    while stack:
        entry = stack.pop()
        if not isinstance(entry, tuple):  # every sub-block of this block is built: leave it
            del nesting.chain[entry.block.idx]
            continue
        block, args = entry
        nesting.chain[block.block.idx] = None
        nesting.max_depth = max(nesting.max_depth, len(nesting.chain) - 1)
        block._requested = []
        block._build(*args)
        requested, block._requested = block._requested, None
        stack.append(block)
        stack.extend(reversed(requested))
    return nesting.max_depth


def make_room_to_run(depth: int) -> None:
    """Make sure running a block nested ``depth`` levels deep stays within the recursion limit."""
    if depth == 0:
        return
    frame: Optional[Any] = sys._getframe()
    used = 0
    while frame is not None:
        frame, used = frame.f_back, used + 1
    need = used + FRAMES_SPARE + FRAMES_PER_LEVEL * depth
    if need > sys.getrecursionlimit():
        sys.setrecursionlimit(need)
