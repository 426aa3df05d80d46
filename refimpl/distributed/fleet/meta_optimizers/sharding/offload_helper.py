"""Sharding's ``optimize_offload`` and ``optimize_cast``: optimizer state and fp32 master
params kept off the device, fp16 params kept persistable.

Mirrors ``paddle/distributed/fleet/meta_optimizers/sharding/offload_helper.py``
(``PlaceType``, ``OffloadHelper``) with Paddle's names and signatures:

* ``offload`` — Adam's ``Moment1`` / ``Moment2`` live in ``<name>@offload_k`` (persistable,
  pinned host memory); before each ``adam`` a ``memcpy`` fetches them to the device
  (``dst_place_type`` CUDA), after it a ``memcpy`` offloads them back (CUDA_PINNED); the startup
  program offloads each right after its initialiser;
* ``offload_fp32param`` — the same for fp32 params whose only forward use is their
  ``p.cast_fp16`` cast: that cast moves behind the update (``adam`` then ``cast`` to the now
  persistable ``p.cast_fp16``), recompute's ``subprog`` copies of the cast are renamed back to
  ``p.cast_fp16``; the startup program gets ``broadcast`` (dp, then mp rings), ``cast``,
  ``memcpy`` appended for each such param;
* ``cast_fp32param_in_optimize`` — that without the memcpys (``optimize_cast``);
* ``opt_sharding_cast_fp32param`` — ``optimize_cast`` under optimizer sharding (fp32 params of
  other ranks dropped, broadcasts renamed to the fp16 params).

How it differs: Paddle fixes the place types when the module is imported
(``core.is_compiled_with_cuda()``); refimpl asks when it inserts the ops, since its backend is
chosen at run time (``set_backend``): on the ``cuda`` backend CUDA = 1 and CUDA_PINNED = 2, on the
NumPy backend both are CPU = 0, as Paddle's CPU wheel has them. On both backends refimpl's pinned
copy is a host array (the ``memcpy`` kernels of ``refimpl/ops/shape_ops.py`` and
``cuda_backend/ops_index.py``). Paddle's asserts are typed errors naming the param.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence

from refimpl.core.dtypes import to_vartype
from refimpl.core.errors import PreconditionNotMet
from refimpl.framework import unique_name
from refimpl.framework.op_role import OP_ROLE_ATTR, OpRole

from .utils import is_optimizer_op, is_update_op, rename_input

__all__ = ["PlaceType", "OffloadHelper"]


def _cuda_build() -> bool:
    from refimpl.base.core import is_compiled_with_cuda
    return is_compiled_with_cuda()


class PlaceType:
    """``memcpy``'s ``dst_place_type`` values (``paddle/fluid/operators/memcpy_op.cc``)."""

    CPU = 0
    CUDA = 1
    CUDA_PINNED = 2
    XPU = 3  # unsupported, as in Paddle

    @staticmethod
    def default_device() -> int:
        return PlaceType.CUDA if _cuda_build() else PlaceType.CPU

    @staticmethod
    def default_pinned() -> int:
        return PlaceType.CUDA_PINNED if _cuda_build() else PlaceType.CPU


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise PreconditionNotMet(msg)



class OffloadHelper:
    """Paddle's ``OffloadHelper`` (see the module docstring)."""

    cpu_place_type = PlaceType.CPU

    def __init__(self, mp_ring_id: Optional[int] = None, dp_ring_id: Optional[int] = None) -> None:
        self.mp_ring_id = mp_ring_id
        self.dp_ring_id = dp_ring_id

    # ---- op insertion -------------------------------------------------------------------------
    def _insert_cast_op(self, block: Any, idx: int, src_name: str, dst_name: str) -> None:
        src_var = block.var(src_name)
        if not block.has_var(dst_name):
            block.create_var(name=dst_name, shape=src_var.shape, dtype="float16", persistable=True)
        dst_var = block.var(dst_name)
        _require(dst_var.dtype == "float16", f"optimize_cast: {dst_name!r} must be float16, is {dst_var.dtype}")
        block._insert_op(idx, type="cast", inputs={"X": src_var}, outputs={"Out": dst_var},
                         attrs={"in_dtype": to_vartype(src_var.dtype), "out_dtype": to_vartype(dst_var.dtype),
                                OP_ROLE_ATTR: OpRole.Optimize})

    def _insert_broadcast_op(self, block: Any, idx: int, param_name: str) -> None:
        rings: List[int] = []
        if self.dp_ring_id is not None:
            rings.append(self.dp_ring_id)
        # a param every mp rank holds whole (not split) is synced in the mp group too
        if self.mp_ring_id is not None and not getattr(block.var(param_name), "is_distributed", False):
            rings.append(self.mp_ring_id)
        # each goes in at idx, so the program reads: mp broadcast, then dp broadcast
        for ring in rings:
            block._insert_op(idx, type="broadcast", inputs={"x": param_name}, outputs={"out": param_name},
                             attrs={"ring_id": ring, "root": 0, OP_ROLE_ATTR: OpRole.Forward})

    def _insert_memcpy_op(self, block: Any, idx: int, src_name: str, dst_name: str,
                          dst_place_type: int) -> None:
        block._insert_op(idx, type="memcpy", inputs={"X": block.var(src_name)},
                         outputs={"Out": block.var(dst_name)},
                         attrs={"dst_place_type": dst_place_type, OP_ROLE_ATTR: OpRole.Optimize})

    def _insert_fetch_op(self, block: Any, idx: int, src_name: str, dst_name: str) -> None:
        self._insert_memcpy_op(block, idx, src_name, dst_name, PlaceType.default_device())

    def _insert_offload_op(self, block: Any, idx: int, src_name: str, dst_name: str) -> None:
        self._insert_memcpy_op(block, idx, src_name, dst_name, PlaceType.default_pinned())

    def _get_offload_var_name(self, name: str) -> str:
        return unique_name.generate(name + "@offload")

    def _create_offload_var(self, var_name: str, offload_var_name: str, blocks: Iterable[Any]) -> None:
        """The device copy stops being persistable; the ``@offload`` copy is the persistable one."""
        for block in blocks:
            var = block.var(var_name)
            var.persistable = False
            block.create_var(name=offload_var_name, shape=var.shape, dtype=var.dtype, persistable=True)

    # ---- fp32 params ------------------------------------------------------------------------
    def offload_fp32param(self, block: Any, startup_block: Any, offload: bool = True) -> None:
        """``(p_fp16) = cast(p); (pout,) = adam(p)`` becomes
        ``(p,) = memcpy(p@offload); (pout,) = adam(p); (p_fp16) = cast(p); (p@offload) = memcpy(p)``
        (without the memcpys when ``offload`` is False)."""
        param_to_idx = {op.input("Param")[0]: idx for idx, op in enumerate(block.ops) if is_update_op(op)}
        param_to_fp16, recompute_to_fp16 = _fp16_casts_of(block, param_to_idx, skip_coalesce=not offload)
        param_to_offload = self._rewrite_updates(block, startup_block, param_to_idx, param_to_fp16,
                                                 recompute_to_fp16, offload)
        self._startup_cast_and_offload(startup_block, param_to_offload, param_to_fp16, offload)

    def _rewrite_updates(self, block: Any, startup_block: Any, params: Any, param_to_fp16: Dict[str, str],
                         recompute_to_fp16: Dict[str, str], offload: bool) -> Dict[str, str]:
        """Walking ``block`` backwards: each update of a param in ``params`` gets its fp16 cast after it
        (and, offloading, a fetch from ``@offload`` before and a copy back after); the forward casts of
        those params go; recompute's casts are renamed. Returns param -> its ``@offload`` name."""
        param_to_offload: Dict[str, str] = {}
        for idx in range(len(block.ops) - 1, -1, -1):
            op = block.ops[idx]
            if is_update_op(op):
                param = op.input("Param")[0]
                if param not in params:
                    continue
                offload_name = self._get_offload_var_name(param)
                param_to_offload[param] = offload_name
                if offload:
                    self._create_offload_var(param, offload_name, [block, startup_block])
                    self._insert_offload_op(block, idx + 1, param, offload_name)
                self._cast_after_update(block, idx, param, param_to_fp16)
                if offload:
                    self._insert_fetch_op(block, idx, offload_name, param)
                continue
            if op.type == "cast" and op.input_arg_names[0] in params:
                block._remove_op(idx, sync=False)
                continue
            _rename_recompute_casts(op, recompute_to_fp16)
        for name in recompute_to_fp16:
            block._remove_var(name)
        return param_to_offload

    def _cast_after_update(self, block: Any, idx: int, param: str, param_to_fp16: Dict[str, str]) -> None:
        _require(param in param_to_fp16, f"optimize_cast: param {param!r} has no cast to float16")
        block.var(param_to_fp16[param]).persistable = True
        self._insert_cast_op(block, idx + 1, param, param_to_fp16[param])

    def _startup_cast_and_offload(self, startup_block: Any, param_to_offload: Dict[str, str],
                                  param_to_fp16: Dict[str, str], offload: bool) -> None:
        """At the end of startup, per param (last initialiser first): {mp, dp} broadcast, cast, offload."""
        insert_idx = len(startup_block.ops)  # as Paddle: after the comm init, at the end
        visited = set()
        for op in reversed(list(startup_block.ops)):
            for out_name in op.output_arg_names:
                if out_name in visited:
                    continue
                if out_name in param_to_offload:
                    if offload:
                        self._insert_offload_op(startup_block, insert_idx, out_name, param_to_offload[out_name])
                    self._insert_cast_op(startup_block, insert_idx, out_name, param_to_fp16[out_name])
                    self._insert_broadcast_op(startup_block, insert_idx, out_name)
                visited.add(out_name)

    def cast_fp32param_in_optimize(self, block: Any, startup_block: Any) -> None:
        """``optimize_cast``: ``(pout,) = adam(p); (p_fp16) = cast(p)``, ``p_fp16`` persistable."""
        self.offload_fp32param(block, startup_block, offload=False)

    # ---- optimizer state ----------------------------------------------------------------------
    def offload(self, block: Any, startup_block: Any) -> None:
        """``(m1, m2) = memcpy(m1@offload, m2@offload); adam(m1, m2, p); (m1@offload, m2@offload) = memcpy(m1, m2)``."""
        to_offload: Dict[str, str] = {}
        for idx in range(len(block.ops) - 1, -1, -1):
            op = block.ops[idx]
            if not is_optimizer_op(op):
                break
            names = [op.input("Moment1")[0], op.input("Moment2")[0]] if op.type in ("adam", "adamw") else []
            for name in names:  # momentum, lars, lamb: nothing offloaded, as in Paddle
                _require(name not in to_offload, f"optimize_offload: {name!r} is offloaded twice")
                to_offload[name] = self._get_offload_var_name(name)
                self._create_offload_var(name, to_offload[name], [block, startup_block])
            for name in names:
                self._insert_offload_op(block, idx + 1, name, to_offload[name])
            for name in names:
                self._insert_fetch_op(block, idx, to_offload[name], name)
        visited = set()
        for idx in range(len(startup_block.ops) - 1, -1, -1):
            for out_name in startup_block.ops[idx].output_arg_names:
                if out_name in visited:
                    continue
                if out_name in to_offload:  # offload right after the initialiser
                    self._insert_offload_op(startup_block, idx + 1, out_name, to_offload[out_name])
                visited.add(out_name)

    # ---- optimizer sharding -------------------------------------------------------------------
    def opt_sharding_cast_fp32param(self, block: Any, startup_block: Any, params: Sequence[str],
                                    offload: bool = False) -> None:
        """``optimize_cast`` with optimizer sharding: like ``cast_fp32param_in_optimize`` for
        ``params``; broadcasts carry the fp16 params and the fp32 params of other ranks go."""
        local_params = {op.input("Param")[0] for op in block.ops if is_update_op(op)}
        global_params = {p: 0 for p in params}
        param_to_fp16, recompute_to_fp16 = _fp16_casts_of(block, global_params, skip_coalesce=True)
        param_to_offload = self._rewrite_updates(block, startup_block, global_params, param_to_fp16,
                                                 recompute_to_fp16, offload)
        for op in block.ops:  # the fused / broadcast params are the fp16 copies now
            if op.type in ("coalesce_tensor", "c_broadcast", "broadcast"):
                _rename_recompute_casts(op, param_to_fp16)
        for param in global_params:
            _require(param in param_to_fp16, f"optimize_cast: param {param!r} has no cast to float16")
            block.var(param_to_fp16[param]).persistable = True
            if param not in local_params:
                block._remove_var(param)
        self._opt_sharding_startup(startup_block, param_to_offload, param_to_fp16, local_params, offload)

    def _opt_sharding_startup(self, startup_block: Any, param_to_offload: Dict[str, str],
                              param_to_fp16: Dict[str, str], local_params: set, offload: bool) -> None:
        insert_idx = len(startup_block.ops)
        visited = set()
        for idx in range(len(startup_block.ops) - 1, -1, -1):
            for out_name in startup_block.ops[idx].output_arg_names:
                if out_name in visited:
                    continue
                if out_name in param_to_fp16:
                    if offload:
                        self._insert_offload_op(startup_block, idx + 1, out_name, param_to_offload[out_name])
                    self._insert_cast_op(startup_block, insert_idx, out_name, param_to_fp16[out_name])
                    self._insert_broadcast_op(startup_block, insert_idx, out_name)
                    if out_name not in local_params:
                        startup_block.var(out_name).persistable = False
                visited.add(out_name)


def _fp16_casts_of(block: Any, candidates: Dict[str, Any], skip_coalesce: bool) -> tuple:
    """Drop from ``candidates`` (in place) the params some forward op other than their fp16 cast
    reads; returns ({param: p.cast_fp16}, {recompute copy: p.cast_fp16}) of those left."""
    param_to_fp16: Dict[str, str] = {}
    fp16_to_recompute: Dict[str, str] = {}
    recompute_to_fp16: Dict[str, str] = {}

    def drop(name: str) -> None:
        candidates.pop(name, None)
        fp16 = param_to_fp16.pop(name, None)
        if fp16 is not None and fp16 in fp16_to_recompute:
            recompute_to_fp16.pop(fp16_to_recompute.pop(fp16))

    for op in block.ops:
        if is_optimizer_op(op):
            break
        # Paddle's stopgap for fuse_grad_merge with optimize_cast: a coalesce_tensor does not count
        if skip_coalesce and op.type == "coalesce_tensor":
            continue
        for input_name in op.input_arg_names:
            if input_name not in candidates:
                continue
            output_name = op.output_arg_names[0] if op.output_arg_names else ""
            if op.type != "cast" or "cast_fp16" not in output_name:
                drop(input_name)  # read in fp32: it must stay on the device
                continue
            if "subprog" not in output_name:
                _require(output_name == input_name + ".cast_fp16",
                         f"optimize_cast: the fp16 cast of {input_name!r} writes {output_name!r}")
                _require(input_name not in param_to_fp16,
                         f"optimize_cast: param {input_name!r} is cast to fp16 more than once")
                param_to_fp16[input_name] = output_name
            else:  # recompute's copy of the cast
                _require(input_name in param_to_fp16,
                         f"optimize_cast: recompute casts {input_name!r} before its first fp16 cast")
                fp16_to_recompute[param_to_fp16[input_name]] = output_name
                recompute_to_fp16[output_name] = param_to_fp16[input_name]
    return param_to_fp16, recompute_to_fp16


def _rename_recompute_casts(op: Any, mapping: Dict[str, str]) -> None:
    for name in op.input_arg_names:
        if name in mapping:
            rename_input(op, name, mapping[name])
    for name in op.output_arg_names:
        if name in mapping:
            op._rename_output(name, mapping[name])
