"""BuildStrategy: the settings a CompiledProgram compiles a program with.

Mirrors ``paddle.static.BuildStrategy`` of Paddle 3.3.1 (the pybind class
``CompiledProgram.BuildStrategy``): the same attribute names, the same
defaults (``fuse_all_reduce_ops`` is on, ``reduce_strategy`` is
``ReduceStrategy.AllReduce``, ``memory_optimize`` is ``None`` ...) and the
same nested enum ``BuildStrategy.ReduceStrategy`` (``AllReduce`` = 0,
``Reduce`` = 1, ``_NoReduce`` = 2). A value of the wrong type is refused
when it is set, as pybind does (here with ``InvalidArgument``).

What refimpl does with them (see ``compiled_program.py`` and
``distributed/passes/data_parallel.py``): ``reduce_strategy``,
``fuse_all_reduce_ops``, ``use_hierarchical_allreduce``,
``hierarchical_allreduce_inter_nranks``, ``num_trainers``, ``trainer_id``
and ``async_mode`` shape the data-parallel rewrite. Everything else
(``enable_inplace``, ``memory_optimize``, the fusion switches,
``nccl_comm_num`` ...) is accepted and kept but changes nothing: refimpl
has no graph fusions and one communicator ring per group. Two additions:
``fuse_grad_size_in_MB`` (the bucket size of fused allreduce; Paddle takes it
from ``FLAGS_fuse_parameter_memory_size`` or, in fleet, from
``DistributedStrategy.fuse_grad_size_in_MB``, whose default 32 is used here)
and ``hierarchical_allreduce_exter_nranks`` (a member of
``compiled_program.cc``'s ``BuildStrategy``, set when a CompiledProgram
compiles: number of ranks / inter nranks).
"""
import copy
import enum

from refimpl.core.errors import InvalidArgument


class ReduceStrategy(enum.IntEnum):
    """How gradients are combined across places (``BuildStrategy.ReduceStrategy``)."""

    AllReduce = 0
    Reduce = 1
    _NoReduce = 2

    def __str__(self):
        return f"ReduceStrategy.{self.name}"


# name -> (default, accepted types); bool fields refuse ints and ints refuse bools, as pybind does
_FIELDS = {
    "allow_cuda_graph_capture": (False, bool),
    "async_mode": (False, bool),
    "bkcl_comm_num": (1, int),
    "build_cinn_pass": (False, bool),
    "cache_runtime_context": (False, bool),
    "debug_graphviz_path": ("", str),
    "enable_addto": (False, bool),
    "enable_auto_fusion": (False, bool),
    "enable_backward_optimizer_op_deps": (True, bool),
    "enable_inplace": (True, bool),
    "fuse_adamw": (False, bool),
    "fuse_all_optimizer_ops": (False, bool),
    "fuse_all_reduce_ops": (True, bool),
    "fuse_bn_act_ops": (False, bool),
    "fuse_bn_add_act_ops": (True, bool),
    "fuse_broadcast_ops": (True, bool),
    "fuse_dot_product_attention": (False, bool),
    "fuse_elewise_add_act_ops": (False, bool),
    "fuse_gemm_epilogue": (False, bool),
    "fuse_grad_size_in_MB": (32, (int, float)),
    "fuse_relu_depthwise_conv": (False, bool),
    "fuse_resunit": (False, bool),
    "fused_attention": (False, bool),
    "fused_feedforward": (False, bool),
    "hierarchical_allreduce_exter_nranks": (0, int),
    "hierarchical_allreduce_inter_nranks": (0, int),
    "memory_optimize": (None, (bool, type(None))),
    "mkldnn_enabled_op_types": (set(), set),
    "nccl_comm_num": (1, int),
    "num_trainers": (1, int),
    "onednn_enabled_op_types": (set(), set),
    "reduce_strategy": (ReduceStrategy.AllReduce, ReduceStrategy),
    "sequential_run": (False, bool),
    "sync_batch_norm": (False, bool),
    "trainer_id": (0, int),
    "trainers_endpoints": ([], list),
    "use_hierarchical_allreduce": (False, bool),
}


def _accepts(types, value):
    types = types if isinstance(types, tuple) else (types,)
    if isinstance(value, bool) and bool not in types:
        return False  # True is an int in Python, not for pybind
    if isinstance(value, ReduceStrategy) and ReduceStrategy not in types:
        return False
    return isinstance(value, types)


class BuildStrategy:
    """Settings for :class:`~refimpl.static.CompiledProgram` (see the module docstring)."""

    ReduceStrategy = ReduceStrategy

    def __init__(self):
        values = {k: copy.copy(d) for k, (d, _) in _FIELDS.items()}
        object.__setattr__(self, "_values", values)

    def __getattr__(self, name):
        values = self.__dict__.get("_values")
        if values is not None and name in values:
            return values[name]
        raise AttributeError(f"'BuildStrategy' object has no attribute {name!r}")

    def __setattr__(self, name, value):
        field = _FIELDS.get(name)
        if field is None:
            raise AttributeError(f"'BuildStrategy' object has no attribute {name!r}")
        if not _accepts(field[1], value):
            want = field[1] if isinstance(field[1], tuple) else (field[1],)
            raise InvalidArgument(f"BuildStrategy.{name}: incompatible value {value!r} "
                                  f"(expected {' or '.join(t.__name__ for t in want)})")
        self._values[name] = value

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(_FIELDS))

    def _copy(self):
        """An independent copy (a CompiledProgram keeps one, as ``compiled_program.cc``'s member does)."""
        other = BuildStrategy()
        for k, v in self._values.items():
            other._values[k] = copy.copy(v)
        return other

    def __repr__(self):
        changed = {k: v for k, v in self._values.items() if v != _FIELDS[k][0]}
        return f"BuildStrategy({', '.join(f'{k}={v!r}' for k, v in sorted(changed.items()))})"
