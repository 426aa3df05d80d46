"""The model-parallel op builders and ``paddle.distributed.split``, static mode.

Mirrors ``paddle/distributed/fleet/layers/mpu/mp_ops.py`` of Paddle 3.3.1
(its legacy-IR static branches): ``_c_identity``, ``_c_concat``, ``_c_split``,
``_mp_allreduce``, ``_c_lookup_table`` (op ``c_embedding``),
``_c_softmax_with_cross_entropy``, ``_linear``, ``_set_var_distributed``,
``_parallel_linear``, ``_parallel_embedding`` and ``split``. Each appends the
op Paddle appends, with the attrs that survive in Paddle's program (Paddle's
``c_split`` and ``mp_allreduce_sum`` protos drop ``use_model_parallel`` /
``use_calc_stream``, so they are not written here either), and the same
variable names (``c_identity_0.tmp_0``, ``_generated_var_0``, ``tmp_0`` ...).

A group of ``None`` means ring 0 and, for rank / nranks, the whole world (the
fleet's worker index and count, Paddle's ``_get_global_env()``).

Differences from Paddle:

* ``split`` of a row-parallel linear whose input it must split writes
  ``c_split`` with ``rank = rank % num_partitions`` and ``nranks =
  num_partitions``. Paddle passes ``group=None`` there, i.e. the global rank
  and world size, which only agree when the world *is* the model-parallel
  group; with data parallelism too, Paddle's program cannot even be built
  (the split input no longer matches the weight). Under pure tensor
  parallelism both programs are the same.
* The checks of ``split`` raise typed errors (``InvalidArgument`` that is also
  the ``AssertionError`` / ``ValueError`` Paddle raises) naming the option and
  its value; refimpl is static-only, so the dygraph branches do not exist.
  One more check: when ring 0 is the static ``'model'`` group (``fleet.init``
  with tensor parallelism), ``num_partitions`` must be its size, checked while
  building (Paddle builds the program and fails, or sums over the wrong
  ranks, when it runs). A variable with no shape where one is read, or an
  embedding ``weight_attr=False``, is an ``InvalidArgument`` too.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

from refimpl.core.errors import InvalidArgument
from refimpl.framework.dtype_default import get_default_dtype
from refimpl.framework.program import default_main_program, default_startup_program
from refimpl.framework.variable import Variable
from refimpl.static.layer_helper import LayerHelper
from refimpl.tensor.math import check_variable

from ...base.compat_errors import InvalidArgumentAssertion, PreconditionAssertion

__all__: list = []

_FLOATS_INTS = ("float16", "float32", "float64", "int32", "int64", "bfloat16", "uint16")
#: an InvalidArgument that is also the ValueError Paddle raises
InvalidArgumentValue = type("InvalidArgumentValue", (InvalidArgument, ValueError), {"kind": InvalidArgument.kind})


def default_dtype() -> str:
    """Paddle's ``paddle.get_default_dtype()`` (``refimpl/framework/dtype_default.py``)."""
    return get_default_dtype()


def _check_input(x: Any, api: str, dtypes: Sequence[str] = _FLOATS_INTS) -> Variable:
    check_variable(x, api)
    if x.dtype not in dtypes:
        raise InvalidArgument(f"{api}: input {x.name!r} has dtype {x.dtype}, expected one of {list(dtypes)}")
    return x


def _shape_of(x: Variable, api: str) -> Tuple[int, ...]:
    """The static shape of ``x``; an error naming ``api`` when the variable has none."""
    if x.shape is None:
        raise InvalidArgument(f"{api}: input {x.name!r} has no shape")
    return x.shape


def _ring(group: Any) -> int:
    return 0 if group is None else int(group.id)


def _global_rank_and_size() -> Tuple[int, int]:
    """Paddle's ``_get_global_env()`` rank and world size: the fleet's worker index and count."""
    from refimpl.distributed import collective
    from refimpl.distributed.fleet import fleet
    if fleet.role_maker is not None:
        return int(fleet.worker_index()), int(fleet.worker_num())
    return collective.get_rank(), collective.get_world_size()


def _rank_in(group: Any) -> Tuple[int, int]:
    """(rank, nranks) of this process in ``group`` (None: the world)."""
    rank, size = _global_rank_and_size()
    if group is None:
        return rank, size
    inner = group.get_group_rank(rank)
    return (group.rank if inner < 0 else inner), int(group.nranks)


def _is_member(group: Any) -> bool:
    return group is None or group.is_member()


def _append(op_type: str, x: Variable, attrs: dict, layer: Optional[str] = None) -> Variable:
    helper = LayerHelper(layer or op_type)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type=op_type, inputs={"X": x}, outputs={"Out": out}, attrs=attrs)
    return out


def _append_c_identity(tensor: Variable, ring_id: int) -> Variable:
    _check_input(tensor, "_c_identity")
    return _append("c_identity", tensor, {"ring_id": ring_id, "use_calc_stream": True, "use_model_parallel": True})


def _c_identity(tensor: Variable, group: Any = None, skip_c_identity_dynamic: bool = False) -> Optional[Variable]:
    """Forward: a copy; backward: the gradient summed over the model-parallel ring (``c_identity``)."""
    if not _is_member(group):
        return None
    return _append_c_identity(tensor, _ring(group))


def _c_concat(tensor: Variable, group: Any = None) -> Optional[Variable]:
    """The shards of all ranks of the ring concatenated on the last axis (``c_concat``)."""
    if not _is_member(group):
        return None
    _check_input(tensor, "_c_concat")
    rank, nranks = _rank_in(group)
    return _append("c_concat", tensor, {"ring_id": _ring(group), "use_calc_stream": True,
                                        "use_model_parallel": True, "nranks": nranks, "rank": rank})


def _append_c_split(tensor: Variable, ring_id: int, rank: int, nranks: int) -> Variable:
    _check_input(tensor, "_c_split")
    return _append("c_split", tensor, {"ring_id": ring_id, "rank": rank, "nranks": nranks})


def _c_split(tensor: Variable, group: Any = None) -> Optional[Variable]:
    """This rank's slice of the last axis, split evenly over the ring (``c_split``)."""
    if not _is_member(group):
        return None
    rank, nranks = _rank_in(group)
    return _append_c_split(tensor, _ring(group), rank, nranks)


def _mp_allreduce(tensor: Variable, op: Any = None, group: Any = None, use_calc_stream: bool = True,
                  use_model_parallel: bool = True, skip_c_identity_dynamic: bool = False) -> Optional[Variable]:
    """The sum over the model-parallel ring (``mp_allreduce_sum``; its gradient is a ``c_identity``)."""
    from refimpl.core.reduce_op import ReduceOp
    if not _is_member(group):
        return None
    if op is not None and op != ReduceOp.SUM:
        raise InvalidArgument(f"_mp_allreduce: only ReduceOp.SUM is supported, got op={op!r}")
    return _append_mp_allreduce(tensor, _ring(group))


def _append_mp_allreduce(tensor: Variable, ring_id: int) -> Variable:
    _check_input(tensor, "mp_allreduce_sum")
    return _append("mp_allreduce_sum", tensor, {"ring_id": ring_id})


def _c_lookup_table(table: Variable, index: Variable, start_index: int = 0, vocab_size: int = -1,
                    name: Optional[str] = None) -> Variable:
    """Rows ``index - start_index`` of this rank's vocabulary shard; ids outside it give zeros (``c_embedding``)."""
    _check_input(index, "c_embedding", ("int32", "int64"))
    helper = LayerHelper("c_embedding", name=name)
    out = helper.create_variable_for_type_inference(table.dtype)
    helper.append_op(type="c_embedding", inputs={"Ids": index, "W": table}, outputs={"Out": out},
                     attrs={"start_index": int(start_index), "vocab_size": int(vocab_size)})
    return out


def _c_softmax_with_cross_entropy(logits: Variable, label: Variable, group: Any = None, return_softmax: bool = False,
                                  ignore_index: int = -100) -> Any:
    """Softmax cross entropy over classes split across the ring (``c_softmax_with_cross_entropy``)."""
    from refimpl.tensor.manipulation import unsqueeze
    if not _is_member(group):
        return None
    rank, nranks = _rank_in(group)
    api = "_c_softmax_with_cross_entropy"
    input_dims, label_dims = len(_shape_of(logits, api)), len(_shape_of(label, api))
    if input_dims - 1 != label_dims and input_dims != label_dims:
        raise InvalidArgumentValue(f"_c_softmax_with_cross_entropy: expected label dims = logits dims - 1 or "
                                   f"= logits dims, got logits {list(_shape_of(logits, api))}, "
                                   f"label {list(_shape_of(label, api))}")
    if input_dims - 1 == label_dims:
        label = unsqueeze(label, axis=-1)
    last, classes = _shape_of(label, api)[-1], _shape_of(logits, api)[-1]
    if last is not None and last >= 0 and classes is not None and classes >= 0 and \
            not 1 <= last <= classes * nranks:
        raise InvalidArgumentValue(f"_c_softmax_with_cross_entropy: expected 1 <= label.shape[-1] <= "
                                   f"logits.shape[-1] * nranks, got label.shape[-1]={last}, "
                                   f"logits.shape[-1]={classes}, nranks={nranks}")
    helper = LayerHelper("c_softmax_with_cross_entropy")
    softmax = helper.create_variable_for_type_inference(logits.dtype)
    loss = helper.create_variable_for_type_inference(logits.dtype)
    helper.append_op(type="c_softmax_with_cross_entropy", inputs={"Logits": logits, "Label": label},
                     outputs={"Softmax": softmax, "Loss": loss},
                     attrs={"ring_id": _ring(group), "rank": rank, "nranks": nranks,
                            "ignore_index": int(ignore_index)})
    return (loss, softmax) if return_softmax else loss


def _linear(x: Variable, weight: Variable, bias: Optional[Variable] = None, name: Optional[str] = None) -> Variable:
    """x @ weight (+ bias), Paddle's function form in mp_ops (``matmul_v2`` with ``transpose_X`` attrs)."""
    _check_input(x, "linear", ("float16", "float32", "float64"))
    dims = len(_shape_of(x, "linear"))
    if dims >= 4:
        raise InvalidArgument(f"linear: x {x.name!r} has {dims} dims; at most 3 are supported")
    helper = LayerHelper("linear", name=name)
    tmp = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="matmul_v2", inputs={"X": [x], "Y": [weight]}, outputs={"Out": tmp},
                     attrs={"transpose_X": False, "transpose_Y": False, "alpha": 1})
    if bias is None:
        return tmp
    res = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="elementwise_add", inputs={"X": [tmp], "Y": [bias]}, outputs={"Out": [res]},
                     attrs={"axis": dims - 1})
    return res


def _set_var_distributed(var: Optional[Variable]) -> None:
    """Mark ``var`` (and its copies in the current main and startup blocks) as one shard of a whole."""
    if var is None:
        return
    var.is_distributed = True
    for program in (default_startup_program(), default_main_program()):
        found = program.current_block()._find_var_recursive(var.name)
        if found is not None:
            found.is_distributed = True


def _shard_linear(num_rows: int, num_cols: int, weight_attr: Any, bias_attr: Any, name: Optional[str]) -> Any:
    """``paddle.nn.Linear(num_rows, num_cols, ...)`` of the default dtype (refimpl's ``Linear`` is float32)."""
    from refimpl.nn.layer.layers import Layer

    class _ShardLinear(Layer):
        def __init__(self) -> None:
            super().__init__(name_scope="linear", dtype=default_dtype())   # named as Linear: linear_N.w_0
            self._weight_attr, self._bias_attr, self.name = weight_attr, bias_attr, name
            self.weight = self.create_parameter(shape=[num_rows, num_cols], attr=weight_attr, is_bias=False)
            self.bias = self.create_parameter(shape=[num_cols], attr=bias_attr, is_bias=True)
    return _ShardLinear()


def _parallel_linear(x: Variable, num_rows: int, num_cols: int, axis: int, param_attr: Any, bias_attr: Any,
                     gather_out: bool, inner_rank: int, nranks: int, split_tensor: bool, name: Optional[str],
                     group: Any = None) -> Optional[Variable]:
    """One shard of a linear layer split by rows (axis 0) or columns (axis 1); see :func:`split`."""
    if not _is_member(group):
        return None
    return _build_parallel_linear(x, num_rows, num_cols, axis, param_attr, bias_attr, gather_out, inner_rank,
                                  nranks, split_tensor, name, _ring(group))


def _build_parallel_linear(x: Variable, num_rows: int, num_cols: int, axis: int, param_attr: Any, bias_attr: Any,
                           gather_out: bool, inner_rank: int, nranks: int, split_tensor: bool, name: Optional[str],
                           ring_id: int) -> Variable:
    """The ops of :func:`_parallel_linear` on ring ``ring_id``, of which this rank is a member."""
    from refimpl.nn import functional as F
    if axis == 0:
        if split_tensor:  # (refimpl: this ring's rank and size, see the module docstring)
            x = _append_c_split(x, ring_id, inner_rank, nranks)
    else:
        x = _append_c_identity(x, ring_id)
    linear = _shard_linear(num_rows, num_cols, param_attr, bias_attr, name)
    # a row split adds the (whole, replicated) bias after the sum over the ring
    linear_out = F.linear(x, linear.weight, None if axis == 0 else linear.bias, linear.name)
    _set_var_distributed(linear.weight)
    if axis == 1 and linear._bias_attr is not False:
        _set_var_distributed(linear.bias)
    if not gather_out:
        return linear_out
    shape = list(linear_out.shape)
    if axis == 1 and shape and shape[0] is not None and shape[0] >= 0:
        shape[0] *= nranks  # (as Paddle: the first dim, not the split one, is what it scales)
    block = default_main_program().current_block()
    out = block.create_var(shape=shape, dtype=linear_out.dtype, persistable=False)
    if axis == 0:
        block.append_op(type="mp_allreduce_sum", inputs={"X": linear_out}, outputs={"Out": out},
                        attrs={"ring_id": ring_id})
        if linear.bias is not None:
            out = out + linear.bias
    else:
        block.append_op(type="c_concat", inputs={"X": linear_out}, outputs={"Out": out},
                        attrs={"rank": inner_rank, "ring_id": ring_id, "nranks": nranks, "use_calc_stream": True,
                               "use_model_parallel": True})
    return out


def _parallel_embedding(x: Variable, per_part_embeddings: int, origin_size: Sequence[int], param_attr: Any,
                        inner_rank: int, num_partitions: int, name: Optional[str],
                        group: Any = None) -> Optional[Variable]:
    """This rank's vocabulary shard looked up (``c_embedding``), summed over the ring (``mp_allreduce_sum``)."""
    if not _is_member(group):
        return None
    return _build_parallel_embedding(x, per_part_embeddings, origin_size, param_attr, inner_rank, num_partitions,
                                     name, _ring(group))


def _build_parallel_embedding(x: Variable, per_part_embeddings: int, origin_size: Sequence[int], param_attr: Any,
                              inner_rank: int, num_partitions: int, name: Optional[str], ring_id: int) -> Variable:
    """The ops of :func:`_parallel_embedding` on ring ``ring_id``, of which this rank is a member."""
    from refimpl.nn import functional as F
    helper = LayerHelper("_parallel_embedding")
    dtype = default_dtype()
    weight = helper.create_parameter(attr=param_attr, shape=[per_part_embeddings, origin_size[1]], dtype=dtype,
                                     is_bias=False)
    if weight is None:
        raise InvalidArgument("paddle.distributed.split: weight_attr=False, but the embedding needs its weight")
    if num_partitions == 1:
        return F.embedding(x, weight=weight, padding_idx=None, sparse=False, name=name)
    default_startup_program().global_block().vars[weight.name].is_distributed = True
    default_main_program().global_block().vars[weight.name].is_distributed = True
    out = _c_lookup_table(weight, x, start_index=inner_rank * per_part_embeddings, vocab_size=origin_size[0],
                          name=name)
    return _append_mp_allreduce(out, ring_id)


def _check_split_args(size: Any, operation: Any, axis: int, num_partitions: int) -> None:
    if not isinstance(size, (list, tuple)):
        raise InvalidArgumentAssertion(f"paddle.distributed.split: size must be a list or tuple, got "
                                       f"{type(size).__name__} {size!r}")
    if len(size) != 2:
        raise InvalidArgumentAssertion(f"paddle.distributed.split: size must have two elements, got {list(size)}")
    if not isinstance(operation, str) or operation not in ("linear", "embedding"):
        raise InvalidArgumentAssertion(f"paddle.distributed.split: operation must be one of ['linear', "
                                       f"'embedding'], got {operation!r}")
    if isinstance(num_partitions, bool) or not isinstance(num_partitions, int) or num_partitions < 1:
        raise InvalidArgumentAssertion(f"paddle.distributed.split: num_partitions must be a positive int, got "
                                       f"{num_partitions!r}")
    if operation == "embedding":
        if axis != 0:
            raise InvalidArgumentAssertion(f"paddle.distributed.split: an embedding is split along axis 0 only, "
                                           f"got axis={axis}")
        if size[0] % num_partitions:
            raise InvalidArgumentAssertion(f"paddle.distributed.split: the vocabulary size size[0]={size[0]} must "
                                           f"be divisible by num_partitions={num_partitions}")
    elif axis not in (0, 1):
        raise InvalidArgumentValue(f"paddle.distributed.split: axis must be 0 or 1, got axis={axis}")
    elif size[axis] % num_partitions:
        what = "rows" if axis == 0 else "columns"
        raise InvalidArgumentAssertion(f"paddle.distributed.split: the {what} of the linear weight "
                                       f"size[{axis}]={size[axis]} must be divisible by "
                                       f"num_partitions={num_partitions}")


def _check_ring_size(num_partitions: int) -> None:
    """split's ops run on ring 0; where that is the static 'model' group, its size is known now and must
    be ``num_partitions`` (Paddle finds out only when the program runs)."""
    from refimpl.distributed.fleet import fleet
    if not fleet.is_collective:
        return
    groups = fleet.get_static_comm_groups()
    if not groups.has_group("model"):
        return
    group = groups.get_model_parallel_group()
    if int(group.id) == 0 and int(group.nranks) != num_partitions:
        raise InvalidArgumentAssertion(f"paddle.distributed.split: num_partitions={num_partitions} but its ring "
                                       f"(ring_id 0, the model-parallel group) has {group.nranks} ranks")


def split(x: Variable, size: Sequence[int], operation: str, axis: int = 0, num_partitions: int = 1,
          gather_out: bool = True, weight_attr: Any = None, bias_attr: Any = None,
          name: Optional[str] = None) -> Variable:
    """Split the weight of a linear layer (by rows: ``axis=0``, by columns: ``axis=1``) or of an embedding
    (by vocabulary rows) over ``num_partitions`` ranks, and compute on the shard of this rank.

    ``size`` is the whole weight's shape. Needs ``fleet.init``; this rank's shard is
    ``fleet.worker_index() % num_partitions``. With ``gather_out`` the whole output is put back
    together (``mp_allreduce_sum`` for rows, ``c_concat`` for columns); else each rank keeps its part.
    """
    from refimpl.distributed.fleet import fleet
    _check_split_args(size, operation, axis, num_partitions)
    if fleet.role_maker is None:
        raise PreconditionAssertion("paddle.distributed.split: call fleet.init() first")
    _check_ring_size(num_partitions)
    inner_rank = fleet.worker_index() % num_partitions
    ring_id = _ring(None)  # Paddle passes group=None: ring 0, of which every rank is a member
    if operation == "embedding":
        return _build_parallel_embedding(x, size[0] // num_partitions, size, weight_attr, inner_rank,
                                         num_partitions, name, ring_id)
    should_split = False
    if axis == 0:
        linear_size = (size[0] // num_partitions, size[1])
        should_split = _shape_of(x, "paddle.distributed.split")[-1] == size[0]
    else:
        linear_size = (size[0], size[1] // num_partitions)
    return _build_parallel_linear(x, linear_size[0], linear_size[1], axis, weight_attr, bias_attr, gather_out,
                                  inner_rank, num_partitions, should_split, name, ring_id)
