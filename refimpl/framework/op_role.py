"""``OpRole``: what part of a training step an op belongs to.

Paddle stores it as the ``op_role`` attr of every op, a bit set with these
values (``paddle/fluid/framework/op_proto_maker.h``). ``op_role_var`` pairs a
parameter with its gradient on backward and optimize ops.
"""
from __future__ import annotations



class OpRole:
    Forward = 0x0000
    Backward = 0x0001
    Optimize = 0x0002
    RPC = 0x0004
    Dist = 0x0008
    LRSched = 0x0010
    Loss = 0x0100
    NotSpecified = 0x1000


OP_ROLE_ATTR = "op_role"
OP_ROLE_VAR_ATTR = "op_role_var"
OP_NAMESCOPE_ATTR = "op_namescope"
OP_DEVICE_ATTR = "op_device"

# attrs every op carries besides its own (Paddle adds them in OpProtoAndCheckerMaker)
COMMON_ATTRS = (OP_ROLE_ATTR, OP_ROLE_VAR_ATTR, OP_NAMESCOPE_ATTR, OP_DEVICE_ATTR)


def is_forward(role: int) -> bool:
    return (role & ~OpRole.Loss) == OpRole.Forward


def is_backward(role: int) -> bool:
    return bool(role & OpRole.Backward)


def is_optimize(role: int) -> bool:
    return bool(role & OpRole.Optimize)


def is_lr_sched(role: int) -> bool:
    return bool(role & OpRole.LRSched)
