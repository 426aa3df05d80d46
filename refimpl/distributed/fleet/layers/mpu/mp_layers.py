"""The tensor-parallel layers, static mode: Column/RowParallelLinear, VocabParallelEmbedding, ParallelCrossEntropy.

Mirrors ``paddle/distributed/fleet/layers/mpu/mp_layers.py`` of Paddle 3.3.1
in static (legacy-IR) mode. Each layer takes the model-parallel group from
the fleet (Paddle's ``tp._HYBRID_PARALLEL_GROUP``, in static mode the
``'model'`` group ``fleet.init`` makes when ``strategy.tensor_parallel``
asks for ``tensor_parallel_configs['tensor_parallel_degree'] > 1``, or
sharding for ``sharding_configs['mp_degree'] > 1``: ring 0, the ranks
``rank // degree`` groups together) unless ``mp_group`` is given, creates
this rank's shard of its parameters (named as ``Linear`` / ``Embedding``
name theirs: ``linear_0.w_0``, ``embedding_0.w_0``) and appends the ops
Paddle appends:

* ``ColumnParallelLinear``: ``c_identity`` -> ``matmul_v2`` ->
  ``elementwise_add`` [-> ``c_concat`` with ``gather_output``]; weight
  ``[in, out / mp]`` and bias ``[out / mp]`` distributed;
* ``RowParallelLinear``: [``c_split`` unless ``input_is_parallel``] ->
  ``matmul_v2`` -> ``mp_allreduce_sum`` -> ``elementwise_add`` of the whole
  bias; weight ``[in / mp, out]`` distributed, bias replicated;
* ``VocabParallelEmbedding``: ``c_embedding`` (this rank's rows
  ``[rank * V / mp, (rank + 1) * V / mp)``) -> ``mp_allreduce_sum``;
* ``ParallelCrossEntropy``: [``unsqueeze2`` of the label] ->
  ``c_softmax_with_cross_entropy``.

As in Paddle's static mode, ``is_distributed`` is set on the main program's
parameter only (not on its startup copy, which ``_set_var_distributed`` of
``paddle.distributed.split`` also marks), so ``TensorParallelOptimizer``
broadcasts these shards over the model-parallel ring too: all ranks of a
ring start from rank 0's shard. With one rank in the group the layers are
plain ``Linear`` / ``Embedding`` / ``cross_entropy`` computations.

Differences: no dygraph branches (``mp_async_allreduce``,
``mp_skip_c_identity``, ``mp_fused_linear_param_grad_add`` and
``fuse_matmul_bias`` raise ``Unimplemented``, as Paddle asserts they are
dygraph-only or need its fused kernels); ``sharded_state_dict`` is absent.
Where Paddle goes on with a None and fails further in (``weight_attr=False``;
``forward`` on a rank outside ``mp_group``, where Paddle's mp ops give None)
refimpl raises ``InvalidArgument`` / ``PreconditionNotMet`` naming the layer.
"""
from __future__ import annotations

from typing import Any, List, Optional

from refimpl.core.errors import InvalidArgument, PreconditionNotMet, Unimplemented
from refimpl.framework.variable import Parameter, Variable
from refimpl.nn import functional as F
from refimpl.nn.initializer import Constant
from refimpl.nn.layer.layers import Layer

from ...base.compat_errors import InvalidArgumentAssertion
from . import mp_ops


def model_parallel_group() -> Any:
    """The static ``'model'`` group of this rank (Paddle: ``tp._HYBRID_PARALLEL_GROUP.get_model_parallel_group()``)."""
    from refimpl.distributed.fleet import fleet
    return fleet.get_static_comm_groups().get_model_parallel_group()


def _group_info(mp_group: Any) -> tuple:
    """(group, nranks, rank in it) of ``mp_group`` or, when None, of the fleet's model-parallel group."""
    group = model_parallel_group() if mp_group is None else mp_group
    return group, int(group.nranks), int(group.rank)


def _refuse_unsupported(layer: str, is_mp: bool, fuse_matmul_bias: bool) -> None:
    """Paddle's dygraph-only ``mp_configs`` switches (they count only with is_mp) and ``fuse_matmul_bias``."""
    from refimpl.distributed.fleet import fleet
    strategy = fleet.get_static_comm_groups().strategy   # None: a table filled by hand, default mp_configs
    mp_configs = strategy.hybrid_configs["mp_configs"] if strategy is not None else None
    if is_mp and getattr(mp_configs, "mp_async_allreduce", False):   # (skip_c_identity, fused_... need it)
        raise Unimplemented(f"{layer}: hybrid_configs['mp_configs'].mp_async_allreduce = True is only available "
                            f"in dygraph mode (refimpl is static-only)")
    if fuse_matmul_bias:
        raise Unimplemented(f"{layer}: fuse_matmul_bias=True needs the fused_gemm_epilogue kernel, which refimpl "
                            f"does not have")


def _parameter(layer: Layer, what: str, shape: List[int], attr: Any, dtype: str, is_bias: bool) -> Parameter:
    """``layer.create_parameter``, which gives None for ``attr=False``: these layers need all their parameters."""
    param = layer.create_parameter(shape=shape, attr=attr, dtype=dtype, is_bias=is_bias)
    if param is None:
        raise InvalidArgument(f"{type(layer).__name__}: {what}_attr=False, but the layer needs its {what}")
    return param


def _mark_shard(param: Parameter, is_mp: bool, split_axis: int) -> None:
    """Paddle's ``is_distributed`` flag and, for a shard, the axis it was split on (``split_axis``)."""
    param.is_distributed = is_mp
    if is_mp:
        # Paddle sets split_axis on the parameter as a dynamic attribute; refimpl's Parameter declares none
        setattr(param, "split_axis", split_axis)


def _member_output(layer: str, out: Optional[Variable]) -> Variable:
    """The output of an mp op, which is None when this rank is not in the layer's ``mp_group``."""
    if out is None:
        raise PreconditionNotMet(f"{layer}: this rank is not a member of the layer's mp_group")
    return out


def _plus(x: Any, y: Variable) -> Variable:
    """``x + y`` by Variable's ``__add__``, which ``refimpl.tensor.patch`` adds at import (mypy does not see it)."""
    return x + y


def _check_divisible(layer: str, option: str, value: int, degree: int) -> None:
    if value % degree:
        raise InvalidArgumentAssertion(f"{layer}: {option}={value} must be divisible by the model-parallel "
                                       f"degree {degree}")


class VocabParallelEmbedding(Layer):
    """An embedding whose vocabulary rows are split over the model-parallel group."""

    def __init__(self, num_embeddings: int, embedding_dim: int, weight_attr: Any = None, mp_group: Any = None,
                 name: Optional[str] = None) -> None:
        super().__init__()
        self.model_parallel_group, self.world_size, self.rank = _group_info(mp_group)
        self.origin_num_embeddings = num_embeddings
        self.is_mp = self.world_size > 1
        _check_divisible("VocabParallelEmbedding", "num_embeddings", num_embeddings, self.world_size)
        per_part_size = num_embeddings // self.world_size
        self.vocab_start_index = self.rank * per_part_size
        self._dtype = mp_ops.default_dtype()
        self._size = [per_part_size, embedding_dim]
        self._weight_attr, self._name = weight_attr, name
        self.num_embeddings = num_embeddings
        self.weight = _parameter(self, "weight", self._size, weight_attr, self._dtype, is_bias=False)
        _mark_shard(self.weight, self.is_mp, 0)

    def forward(self, x: Variable) -> Variable:
        if not self.is_mp:
            return F.embedding(x, weight=self.weight, padding_idx=None, sparse=False, name=self._name)
        out = mp_ops._c_lookup_table(self.weight, x, start_index=self.vocab_start_index,
                                     vocab_size=self.num_embeddings, name=self._name)
        return _member_output("VocabParallelEmbedding",
                              mp_ops._mp_allreduce(out, group=self.model_parallel_group, use_calc_stream=True,
                                                   use_model_parallel=True))


class ColumnParallelLinear(Layer):
    """A linear layer whose output columns are split over the model-parallel group."""

    def __init__(self, in_features: int, out_features: int, weight_attr: Any = None, has_bias: Optional[bool] = None,
                 gather_output: bool = True, fuse_matmul_bias: bool = False, mp_group: Any = None,
                 name: Optional[str] = None) -> None:
        super().__init__()
        self.model_parallel_group, self.world_size, _ = _group_info(mp_group)
        self._name = name
        self.is_mp = self.world_size > 1
        self.gather_output = gather_output
        _check_divisible("ColumnParallelLinear", "out_features", out_features, self.world_size)
        self.output_size_per_partition = out_features // self.world_size
        self._weight_attr = weight_attr
        self._dtype = mp_ops.default_dtype()
        self.weight = _parameter(self, "weight", [in_features, self.output_size_per_partition], weight_attr,
                                 self._dtype, is_bias=False)
        _mark_shard(self.weight, self.is_mp, 1)
        self.bias = (_parameter(self, "bias", [self.output_size_per_partition], Constant(0.0), self._dtype,
                                is_bias=True) if has_bias else None)
        if self.bias is not None:
            _mark_shard(self.bias, self.is_mp, 0)
        _refuse_unsupported("ColumnParallelLinear", self.is_mp, fuse_matmul_bias)
        self.fuse_matmul_bias = fuse_matmul_bias

    def forward(self, x: Variable) -> Variable:
        if self.is_mp:
            x = _member_output("ColumnParallelLinear", mp_ops._c_identity(x, group=self.model_parallel_group))
        out = F.linear(x, self.weight, self.bias, name=self._name)
        if self.gather_output and self.is_mp:
            out = _member_output("ColumnParallelLinear", mp_ops._c_concat(out, group=self.model_parallel_group))
        return out


class RowParallelLinear(Layer):
    """A linear layer whose input rows (the weight's rows) are split over the model-parallel group."""

    def __init__(self, in_features: int, out_features: int, weight_attr: Any = None, has_bias: bool = True,
                 input_is_parallel: bool = False, fuse_matmul_bias: bool = False, mp_group: Any = None,
                 name: Optional[str] = None) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.input_is_parallel = input_is_parallel
        self._weight_attr, self._name = weight_attr, name
        self._dtype = mp_ops.default_dtype()
        self.model_parallel_group, self.world_size, self.rank = _group_info(mp_group)
        self.is_mp = self.world_size > 1
        _refuse_unsupported("RowParallelLinear", self.is_mp, fuse_matmul_bias)
        _check_divisible("RowParallelLinear", "in_features", in_features, self.world_size)
        self.input_size_per_partition = in_features // self.world_size
        self.weight = _parameter(self, "weight", [self.input_size_per_partition, out_features], weight_attr,
                                 self._dtype, is_bias=False)
        _mark_shard(self.weight, self.is_mp, 0)
        self.bias = (_parameter(self, "bias", [out_features], Constant(0.0), self._dtype, is_bias=True)
                     if has_bias else None)
        self.fuse_matmul_bias = fuse_matmul_bias

    def forward(self, x: Variable) -> Variable:
        if not self.is_mp:
            return F.linear(x, self.weight, self.bias, name=self._name)
        if not self.input_is_parallel:
            x = _member_output("RowParallelLinear", mp_ops._c_split(x, group=self.model_parallel_group))
        out = F.linear(x, self.weight, name=self._name)
        out = _member_output("RowParallelLinear", mp_ops._mp_allreduce(out, group=self.model_parallel_group,
                                                                       use_calc_stream=True,
                                                                       use_model_parallel=True))
        return _plus(out, self.bias) if self.bias is not None else out


class ParallelCrossEntropy(Layer):
    """Softmax cross entropy over logits whose classes are split over the model-parallel group."""

    def __init__(self, mp_group: Any = None, name: Optional[str] = None, ignore_index: int = -100) -> None:
        super().__init__()
        self.name = name
        self.model_parallel_group, self.world_size, self.rank = _group_info(mp_group)
        self.ignore_index = ignore_index

    def forward(self, input: Variable, label: Variable) -> Variable:
        return mp_ops._c_softmax_with_cross_entropy(input, label, group=self.model_parallel_group,
                                                    ignore_index=self.ignore_index)


__all__ = ["VocabParallelEmbedding", "ColumnParallelLinear", "RowParallelLinear", "ParallelCrossEntropy"]
