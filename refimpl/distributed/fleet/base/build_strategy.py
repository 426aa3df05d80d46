"""``BuildStrategy``: the graph-building options a DistributedStrategy carries.

Mirrors ``paddle.static.BuildStrategy`` (a C++ class in Paddle) and its
``ReduceStrategy`` enum, with the same attributes and defaults as a fresh
object in Paddle 3.3.1. refimpl runs programs without graph passes, so these
are settings only: ``DistributedStrategy.build_strategy`` stores the fields
that exist in the strategy's ``BuildStrategy`` message and gives back a new
object. Unknown attribute names raise ``AttributeError`` as in Paddle.
"""
import copy
import enum


class ReduceStrategy(enum.IntEnum):
    """How gradients are combined across devices (``BuildStrategy.ReduceStrategy``)."""

    AllReduce = 0
    Reduce = 1
    _NoReduce = 2


_DEFAULTS = {
    "allow_cuda_graph_capture": False, "async_mode": False, "bkcl_comm_num": 1, "build_cinn_pass": False,
    "cache_runtime_context": False, "debug_graphviz_path": "", "enable_addto": False, "enable_auto_fusion": False,
    "enable_backward_optimizer_op_deps": True, "enable_inplace": True, "fuse_adamw": False,
    "fuse_all_optimizer_ops": False, "fuse_all_reduce_ops": True, "fuse_bn_act_ops": False,
    "fuse_bn_add_act_ops": True, "fuse_broadcast_ops": True, "fuse_dot_product_attention": False,
    "fuse_elewise_add_act_ops": False, "fuse_gemm_epilogue": False, "fuse_relu_depthwise_conv": False,
    "fuse_resunit": False, "fused_attention": False, "fused_feedforward": False,
    "hierarchical_allreduce_inter_nranks": 0, "memory_optimize": None, "mkldnn_enabled_op_types": [],
    "nccl_comm_num": 1, "num_trainers": 1, "onednn_enabled_op_types": [],
    "reduce_strategy": ReduceStrategy.AllReduce, "sequential_run": False, "sync_batch_norm": False,
    "trainer_id": 0, "trainers_endpoints": [], "use_hierarchical_allreduce": False,
}


class BuildStrategy:
    """Graph-building options; every attribute of Paddle's ``BuildStrategy``, with its default."""

    ReduceStrategy = ReduceStrategy
    __slots__ = tuple(_DEFAULTS)

    def __init__(self, **fields):
        for name, value in _DEFAULTS.items():
            object.__setattr__(self, name, copy.copy(value))
        for name, value in fields.items():
            setattr(self, name, value)

    def __setattr__(self, name, value):
        if name not in _DEFAULTS:
            raise AttributeError(f"'BuildStrategy' object has no attribute '{name}'")
        if name == "reduce_strategy":
            value = ReduceStrategy(int(value))
        object.__setattr__(self, name, value)

    def _copy(self):
        """An independent copy (Paddle's ``BuildStrategy._copy``)."""
        return copy.deepcopy(self)

    def __eq__(self, other):
        return isinstance(other, BuildStrategy) and all(getattr(self, n) == getattr(other, n) for n in _DEFAULTS)

    __hash__ = None

    def __repr__(self):
        changed = [f"{n}={getattr(self, n)!r}" for n in _DEFAULTS if getattr(self, n) != _DEFAULTS[n]]
        return f"BuildStrategy({', '.join(changed)})"


__all__ = ["BuildStrategy", "ReduceStrategy"]
