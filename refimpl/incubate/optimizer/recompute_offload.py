"""Checkpoint offload for ``RecomputeOptimizer``: park checkpoints in pinned host memory.

Mirrors the offload half of ``python/paddle/incubate/optimizer/recompute.py`` (Paddle 3.3.1:
``_offload``, ``_create_vars``, ``_append_fill_constant_ops``, ``_parse_backward`` /
``_update_backward``, ``_parse_forward`` / ``_update_forward``). After ``append_backward`` with
checkpoints has built the recompute program, every checkpoint but the last (in the sorted order
``append_backward`` returns) gets:

* a ``<ckpt>@Pinned_k`` var (stop_gradient) and a ``<ckpt>@Fetch_k`` var, both of
  ``checkpoint_shape`` (``unique_name.generate`` names them; the last checkpoint gets the pair
  too but no op uses it), and a startup ``fill_constant`` (value 0, ``place_type`` 2) of the pinned
  var, as Paddle pre-allocates the pinned buffers;
* in the forward, ``memcpy(X=ckpt, Out=@Pinned, dst_place_type=2, op_role=0)`` right after the op
  that writes it;
* in the backward, ``memcpy(X=@Pinned, Out=@Fetch, dst_place_type=1, op_role=1)``: the
  second-to-last checkpoint's before the first backward op (``op_role`` exactly 1), each earlier
  one before the first backward use of the checkpoint after it; the backward's reads of the
  checkpoint are renamed to ``@Fetch``.

Paddle's sync points (single-stream memcpy) insert no ops; like Paddle, they are still checked,
so the same programs are refused. Paddle's ``assert`` statements become :class:`OffloadError` (an
InvalidArgument that is also the AssertionError), its ValueErrors :class:`OffloadOrderError`.

In refimpl the pinned copy lives on the host on both backends (the ``memcpy`` kernels of
``refimpl/ops/shape_ops.py`` / ``cuda_backend/ops_index.py``); ``exe.memory_stats()`` counts it,
like any non-persistable var an op writes, under ``activations``.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from refimpl.core.dtypes import to_vartype
from refimpl.core.errors import InvalidArgument
from refimpl.framework import unique_name
from refimpl.framework.op_role import OP_ROLE_ATTR, OpRole

PINNED_PLACE, GPU_PLACE = 2, 1  # memcpy's dst_place_type values (paddle/fluid/operators/memcpy_op.cc)


class OffloadError(InvalidArgument, AssertionError):
    """The program does not fit offload's schedule (Paddle: an ``AssertionError``)."""


class OffloadOrderError(InvalidArgument, ValueError):
    """A checkpoint written twice, or read in backward before its fetch (Paddle: a ``ValueError``)."""


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise OffloadError(f"RecomputeOptimizer offload: {message}")


def _role(op: Any) -> int:
    return int(op.attr(OP_ROLE_ATTR)) if op.has_attr(OP_ROLE_ATTR) else 0


def check_checkpoint_shape(checkpoint_shape: Sequence[int]) -> List[int]:
    """``checkpoint_shape`` as a list: not empty, every dim a positive int (checked before any op is
    built, where Paddle asserts in ``_offload``, after the backward)."""
    shape = list(checkpoint_shape) if isinstance(checkpoint_shape, (list, tuple)) else []
    _check(len(shape) > 0, f"checkpoint_shape {checkpoint_shape!r} should be an non empty list like: "
                           "[12, 512, 1024]")
    _check(all(isinstance(d, int) and d > 0 for d in shape),
           f"all ele in checkpoint_shape {shape} should be a determined integer larger than 0")
    return shape


def offload_checkpoints(loss: Any, startup_program: Any, sorted_names: Sequence[str],
                        checkpoint_shape: Sequence[int]) -> Dict[str, Tuple[str, str]]:
    """Insert the offload and fetch ``memcpy`` ops; ``{checkpoint: (pinned name, fetch name)}``."""
    shape = check_checkpoint_shape(checkpoint_shape)
    block = loss.block
    names = {c: _create_vars(block, c, shape) for c in sorted_names}
    _fill_pinned(block, startup_program.global_block(), [p for p, _ in names.values()], shape)
    bw_start = _insert_fetches(block, list(sorted_names), names)
    _insert_offloads(block, list(sorted_names), names, bw_start)
    return names


def _create_vars(block: Any, ckpt: str, shape: List[int]) -> Tuple[str, str]:
    dtype = block.var(ckpt).dtype
    pinned, fetch = unique_name.generate(ckpt + "@Pinned"), unique_name.generate(ckpt + "@Fetch")
    block.create_var(name=pinned, shape=shape, dtype=dtype, persistable=False, stop_gradient=True)
    block.create_var(name=fetch, shape=shape, dtype=dtype, persistable=False, stop_gradient=False)
    return pinned, fetch


def _fill_pinned(main_block: Any, startup_block: Any, pinned: List[str], shape: List[int]) -> None:
    for name in pinned:
        dtype = main_block.var(name).dtype
        startup_block.create_var(name=name, shape=shape, dtype=dtype, persistable=False, stop_gradient=True)
        startup_block.append_op(type="fill_constant", outputs={"Out": [name]},
                                attrs={"shape": list(main_block.var(name).shape), "dtype": to_vartype(dtype), "value": 0.0,
                                       "place_type": PINNED_PLACE, OP_ROLE_ATTR: int(OpRole.Forward)})


def _memcpy(block: Any, index: int, src: str, dst: str, role: int, place: int) -> None:
    block._insert_op(index, type="memcpy", inputs={"X": [src]}, outputs={"Out": [dst]},
                     attrs={"dst_place_type": place, OP_ROLE_ATTR: role})


def _insert_fetches(block: Any, ckpts: List[str], names: Dict[str, Tuple[str, str]]) -> int:
    """Fetch ops and renames in the backward (Paddle's ``_parse_backward``); the backward's first index."""
    to_fetch = ckpts[:-1]  # the last checkpoint stays on the device
    need = set(to_fetch)
    used = {c: 0 for c in to_fetch}
    ops = block.ops
    bw_start = next((i for i, op in enumerate(ops) if _role(op) == int(OpRole.Backward)), len(ops))
    _check(bw_start < len(ops), "Could NOT found backward op in prog")
    _check(len(to_fetch) > 0, "Could NOT found checkpoint to fetch")
    fetches: Dict[int, str] = {bw_start: to_fetch.pop()}
    fetched = fetches[bw_start]
    current: Optional[str] = None
    for idx in range(bw_start, len(ops)):
        for var in ops[idx].input_arg_names:
            if var not in need:
                continue
            if var in to_fetch:
                raise OffloadOrderError(f"RecomputeOptimizer offload: use checkpoint [{var}] before fetch in BW")
            if used[var] == 0:
                current = fetched
                if var != ckpts[0]:  # nothing is fetched ahead of the first checkpoint
                    _check(len(to_fetch) > 0, "Could NOT found checkpoint to fetch")
                    fetched = to_fetch.pop()
                    fetches[idx] = fetched
            _check(current == var, f"Current recompute segment should use [{current}] BUT got [{var}]")
            ops[idx]._rename_input(var, names[var][1])
            used[var] += 1
    _check(not to_fetch, f"{to_fetch} checkpoints have NOT been Recorded")
    for idx in sorted(fetches, reverse=True):
        c = fetches[idx]
        _memcpy(block, idx, names[c][0], names[c][1], int(OpRole.Backward), GPU_PLACE)
    return bw_start


def _insert_offloads(block: Any, ckpts: List[str], names: Dict[str, Tuple[str, str]], bw_start: int) -> None:
    """Offload ops after each checkpoint's producer (Paddle's ``_parse_forward``), with its sync checks."""
    to_offload, last = ckpts[:-1], ckpts[-1]
    need = set(to_offload)
    count = {c: 0 for c in to_offload}
    last_use = {c: -1 for c in to_offload}
    synced: Set[str] = set()
    ops = block.ops
    fw_start = next((i for i, op in enumerate(ops) if _role(op) == int(OpRole.Forward)), len(ops))
    _check(fw_start < len(ops), "Could NOT found Forward op in prog")

    def sync(c: str, at_use_count: bool) -> None:
        # Paddle records a sync point (no op: one stream) after the checkpoint's last forward use
        _check(c not in synced, f"Try to sync the checkpoint [{c}] twice")
        if not at_use_count:
            _check(last_use[c] > 0, f"last_usage_idx of checkpoint [{c}] should large than 0")
        synced.add(c)

    offload_at: Dict[int, str] = {}
    prev: Optional[str] = None
    for idx in range(fw_start, bw_start):
        op = ops[idx]
        outs = op.output_arg_names
        for var in outs:
            if var in need or var == last:
                _check(len(outs) == 1, f"checkpoint should be the only Output of a certain op, but [{var}] "
                                       f"is from [{op.type}]")
            if var in need:
                if not to_offload or to_offload[0] != var:
                    if var not in to_offload:
                        raise OffloadOrderError("RecomputeOptimizer offload: There should be just ONE op that "
                                                f"output checkpoint [{var}]")
                    _check(False, f"expected to offload [{to_offload[0]}] but got [{var}]")
                if prev is not None:
                    sync(prev, count[prev] == 0)
                offload_at[idx + 1] = to_offload.pop(0)
                prev = var
            if var == last:
                _check(prev == ckpts[-2], f"the last offload checkpoint before [{last}] is suppose to be "
                                          f"[{ckpts[-2]}], but got [{prev}]")
                # Paddle tests the last use index (not the count) against 0 here
                sync(prev, last_use[prev] == 0)  # type: ignore[index]
        for var in op.input_arg_names:
            if var in need:
                _check(var not in synced, f"checkpoint [{var}] used after sync")
                count[var] += 1
                last_use[var] = idx
    _check(not to_offload, f"{to_offload} checkpoints have NOT been Recorded")
    late = [c for i, c in offload_at.items() if i >= bw_start]  # Paddle inserts only inside the forward
    _check(not late, f"{late} checkpoints left un-Offloaded")
    _check(len(synced) == len(need), f"{need - synced} checkpoints have NOT been Recorded")
    for idx in sorted(offload_at, reverse=True):
        c = offload_at[idx]
        _memcpy(block, idx, c, names[c][0], int(OpRole.Forward), PINNED_PLACE)


__all__: list = []
