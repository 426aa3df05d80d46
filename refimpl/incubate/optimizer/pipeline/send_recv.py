"""Send/recv pairs at stage boundaries, and the two passes over the section program that move them.

Mirrors ``_insert_sendrecv_ops_for_boundaries``, ``_optimize_forward_send_sync`` and ``_mv_head_recv`` of
Paddle 3.3.1's ``python/paddle/incubate/optimizer/pipeline.py``. For every input an op reads from
another stage, a ``send_v2`` on the writer's stage and a ``recv_v2`` on the reader's are inserted before
the op (hop by hop when stages are more than one apart), on the ring of the ordered stage pair
(``pipeline_pair`` / ``pp_ring_map``, key ``prev * 1000 + cur``, ids counted up from ``ring_id``).
Under 1F1B the send is asynchronous: ``c_sync_calc_stream`` before it, ``c_sync_comm_stream`` after (for a
backward send, at the first optimize op); a forward send's comm sync is later replaced by a ``nop``
after the first backward recv. With ``mp_degree > 1`` an activation whose size divides by it travels as
``partial_send`` / ``partial_recv`` + ``partial_allgather``. Differences: Paddle's asserts are typed errors.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np

from refimpl.core.dtypes import to_vartype
from refimpl.framework.op_role import COMMON_ATTRS, OP_DEVICE_ATTR, OP_ROLE_ATTR, OpRole
from refimpl.ops.registry import get_op_def

from .devices import PipelineBuildError

__all__ = ["SendRecvMixin"]

_RECVS = ("partial_recv", "partial_allgather", "nop", "recv_v2")


def _proto_attrs(op_type: str, attrs):
    """Only the attrs the op declares: Paddle's ``Operator`` drops the others it is given (the builder
    passes ``num`` / ``id`` to ``send_v2``, ``use_calc_stream`` to ``partial_send``, ...)."""
    opdef = get_op_def(op_type)
    return {k: v for k, v in (attrs or {}).items()
            if k in opdef.attrs or k in opdef.extra_attrs or k in COMMON_ATTRS}


class SendRecvMixin:
    """Stage-boundary communication of :class:`PipelineOptimizer`."""

    _pipeline_pair: List[Tuple[int, int]]
    _pp_ring_map: Dict[int, int]

    def _pair_ring(self, prev_id: int, cur_id: int) -> int:
        pair = (prev_id, cur_id)
        key = prev_id * 1000 + cur_id
        if pair not in self._pipeline_pair:
            self._pipeline_pair.append(pair)
            self._pp_ring_map[key] = self.ring_id
            self.ring_id += 1
        return self._pp_ring_map[key]

    def _recv_shape(self, var) -> List[int]:
        shape = list(var.shape)
        if shape and shape[0] < 0:
            shape[0] = self.micro_batch_size
        return shape

    def _check_stage(self, op, cur_id: int, prev_id: int) -> None:
        if self._is_forward_op(op):
            if not prev_id < cur_id:
                raise PipelineBuildError(f"PipelineOptimizer: in forward, send/recv can only be passed forward, "
                                         f"but op {op.type!r} on stage {cur_id} reads from stage {prev_id}; "
                                         f"check its op_device")
        elif self._is_backward_op(op):
            if not prev_id > cur_id:
                raise PipelineBuildError(f"PipelineOptimizer: in backward, send/recv can only be passed backward, "
                                         f"but op {op.type!r} on stage {cur_id} reads from stage {prev_id}; "
                                         f"check its op_device")
        else:
            raise PipelineBuildError(f"PipelineOptimizer: send/recv should only be inserted in forward or "
                                     f"backward; op {op.type!r} of role {self._role(op)} reads a var of "
                                     f"another stage")

    def _insert_sendrecv_ops_for_boundaries(self, block) -> None:
        seen: Dict[str, list] = {}
        first_opt = next((i for i, op in enumerate(block.ops) if self._is_optimize_op(op)), None)
        state = {"extra": 0, "first_opt": first_opt}
        for index, op in enumerate(list(block.ops)):
            cur_device = op.attr(OP_DEVICE_ATTR)
            if cur_device == f"{self._device}:all":
                continue
            for var_name in op.input_arg_names:
                if block.var(var_name).is_data:
                    continue
                prev_op = self._find_prev_op(index, var_name)
                if prev_op is None:
                    if var_name not in self._param_device_map:
                        continue
                    prev_device = self._param_device_map[var_name]
                else:
                    prev_device = prev_op.attr(OP_DEVICE_ATTR)
                if not prev_device or prev_device == f"{self._device}:all" or prev_device == cur_device:
                    continue
                pairs = seen.setdefault(var_name, [])
                if (cur_device, prev_device) in pairs:
                    continue
                self._hop(block, op, index, var_name, pairs, state, int(cur_device.split(":")[1]),
                          int(prev_device.split(":")[1]))

    def _hop(self, block, op, index, var_name, pairs, state, cur_id: int, prev_id: int) -> None:
        """Paddle's inner ``_insert_send_recv``: one hop, or the hops through the stages in between."""
        cur_dev, prev_dev = f"{self._device}:{cur_id}", f"{self._device}:{prev_id}"
        if (cur_dev, prev_dev) in pairs:
            return
        if abs(cur_id - prev_id) > 1:
            step = 1 if cur_id > prev_id else -1
            self._hop(block, op, index, var_name, pairs, state, cur_id - step, prev_id)
            self._hop(block, op, index, var_name, pairs, state, cur_id, cur_id - step)
            pairs.append((cur_dev, prev_dev))
            return
        pairs.append((cur_dev, prev_dev))
        role = self._role(op)
        var = block.vars[var_name]
        ring_id = self._pair_ring(prev_id, cur_id)

        def put(at, type_, inputs=None, outputs=None, attrs=None, count=True):
            new = block._insert_op(at + state["extra"], type_, inputs, outputs, _proto_attrs(type_, attrs))
            if count:
                state["extra"] += 1
            return new

        if self.schedule_mode == "F-then-B":
            put(index, "send_v2", {"X": var}, None, {OP_DEVICE_ATTR: prev_dev, OP_ROLE_ATTR: role,
                                                     "use_calc_stream": True, "peer": 1, "ring_id": ring_id})
            put(index, "recv_v2", None, {"Out": [var]}, {
                "out_shape": self._recv_shape(var), "dtype": to_vartype(var.dtype), OP_DEVICE_ATTR: cur_dev,
                OP_ROLE_ATTR: role, "use_calc_stream": True, "peer": 0, "ring_id": ring_id})
        elif self.schedule_mode == "1F1B":
            self._hop_1f1b(block, op, index, var, role, ring_id, cur_id, prev_id, put, state)
        else:
            raise PipelineBuildError(f"PipelineOptimizer: only 'F-then-B' and '1F1B' are supported as "
                                     f"schedule_mode; the given value is {self.schedule_mode!r}")

    def _hop_1f1b(self, block, op, index, var, role, ring_id, cur_id, prev_id, put, state) -> None:
        cur_dev, prev_dev = f"{self._device}:{cur_id}", f"{self._device}:{prev_id}"
        shape = self._recv_shape(var)
        use_mp = self.mp_degree > 1 and int(np.prod(shape)) % self.mp_degree == 0
        if "subprog" in var.name:  # a recompute checkpoint sent again: copy the first one's value
            origin = block.var(var.name.split("subprog")[0][:-1])
            put(index, "assign", {"X": [origin]}, {"Out": [var]}, {
                "out_shape": shape, "dtype": to_vartype(var.dtype), OP_DEVICE_ATTR: cur_dev, OP_ROLE_ATTR: role,
                "use_calc_stream": True})
            return
        self._check_stage(op, cur_id, prev_id)
        put(index, "c_sync_calc_stream", {"X": [var]}, {"Out": [var]}, {OP_DEVICE_ATTR: prev_dev,
                                                                      OP_ROLE_ATTR: role})
        prefix = block.vars.get(var.name.split("@")[0])
        is_param = prefix is not None and prefix.is_parameter
        partial = use_mp and not is_param
        mp = {"num": self.mp_degree, "id": self.mp_rank}
        put(index, "partial_send" if partial else "send_v2", {"X": var}, None, dict(
            {OP_DEVICE_ATTR: prev_dev, OP_ROLE_ATTR: role, "use_calc_stream": False, "ring_id": ring_id,
             "peer": 1}, **mp))
        if role == OpRole.Backward:  # a backward send completes before the update
            if state["first_opt"] is None:
                raise PipelineBuildError(f"PipelineOptimizer: backward send of {var.name!r} needs an optimize op "
                                         f"to sync before, and the program has none")
            at, new_role = state["first_opt"], OpRole.Optimize
        else:
            at, new_role = index, OpRole.Backward
        sync = put(at, "c_sync_comm_stream", {"X": [var]}, {"Out": [var]}, {
            OP_DEVICE_ATTR: prev_dev, OP_ROLE_ATTR: new_role, "ring_id": ring_id}, count=False)
        if role == OpRole.Forward:  # it went in before ``index``: later inserts shift by one more
            sync._set_attr("pipeline_flag", "")
            state["extra"] += 1
        put(index, "partial_recv" if partial else "recv_v2", None, {"Out": [var]}, dict(
            {"out_shape": shape, "dtype": to_vartype(var.dtype), OP_DEVICE_ATTR: cur_dev, OP_ROLE_ATTR: role,
             "use_calc_stream": True, "peer": 0, "ring_id": ring_id}, **mp))
        if partial:
            put(index, "partial_allgather", {"X": [var]}, {"Out": [var]}, {
                OP_DEVICE_ATTR: cur_dev, OP_ROLE_ATTR: role, "use_calc_stream": True, "ring_id": 0,
                "nranks": self.mp_degree, "rank": self.mp_rank})

    # ---- passes over this stage's section program ---------------------------------------------------
    def _optimize_forward_send_sync(self, program) -> None:
        """1F1B: a forward send's ``c_sync_comm_stream`` goes; a ``nop`` after the first backward recv keeps
        the sent var alive instead (the backward recv completing means the forward send has too)."""
        if self.schedule_mode != "1F1B":
            return
        block = program.block(0)
        recv_type = "recv_v2" if self.mp_degree == 1 else "partial_recv"
        backward_recv = next((i for i, op in enumerate(block.ops)
                              if op.type == recv_type and self._is_backward_op(op)), None)
        if backward_recv is None:  # the last stage
            return
        offset = 0
        for index, op in enumerate(list(block.ops)):
            if index >= backward_recv:
                break
            if op.type == "c_sync_comm_stream" and op.has_attr("pipeline_flag"):
                var = block.var(op.input_arg_names[0])
                block._remove_op(index + offset)
                offset -= 1
                block._insert_op(backward_recv, "nop", {"X": [var]}, {"Out": [var]},
                                 {OP_ROLE_ATTR: OpRole.Backward})

    def _mv_head_recv(self, program) -> None:
        """Move every recv (and partial_allgather, nop) to the head of its forward / backward phase."""
        forward_at, backward_at = 0, None
        block = program.global_block()
        for i in range(len(block.ops)):
            op = block.ops[i]
            role = self._role(op)
            if role == OpRole.Backward and backward_at is None:
                backward_at = i
            if op.type not in _RECVS:
                continue
            if role == OpRole.Forward:
                if i == forward_at:
                    forward_at += 1
                    continue
                at = forward_at
            elif role == OpRole.Backward:
                if i == backward_at:
                    backward_at += 1
                    continue
                at = backward_at
            else:
                raise PipelineBuildError(f"PipelineOptimizer: recv op {op.type!r} has role {role}; only forward "
                                         f"and backward recvs can move to the head of their phase")
            block.ops.insert(at, block.ops.pop(i))
            block.program._bump()
            if role == OpRole.Forward:
                forward_at += 1
            else:
                backward_at += 1
