"""The op lists that decide which ops AMP runs in low precision.

Mirrors Paddle 3.3.1's ``python/paddle/static/amp/fp16_lists.py`` and the
constants it imports from ``python/paddle/amp/amp_lists.py`` (white, black
and extra-black lists, kept here since refimpl has no ``paddle.amp`` package):
``AutoMixedPrecisionLists`` (alias ``CustomOpLists``) starts from the default
white / black / gray lists, moves the custom ops between them as Paddle does,
and holds ``unsupported_list``, the ops with no low-precision kernel on the
device.

Where the unsupported list comes from (the rule behind ``_get_sys_unsupported_list``):
Paddle asks ``core.op_supported_infos("GPU", dtype)`` (XPU and custom devices
aside), i.e. which op types have a *GPU kernel* of that dtype compiled into the
running build. A CPU wheel has no GPU kernel at all, so every op is
"unsupported" there, ``cast_model_to_fp16`` keeps every op in float32 and
inserts no cast: that is why Paddle's recorded fp16 programs on CPU are all
float32. refimpl is one build whose GPU kernels are switched on with
``refimpl.set_backend("cuda")`` / ``REFIMPL_BACKEND=cuda`` (what
``paddle.base.core.is_compiled_with_cuda()`` reports): then an op counts as
having a float16 / bfloat16 GPU kernel when refimpl's CUDA backend registers a
kernel for it (those kernels take low-precision tensors), and the programs get
the casts Paddle's GPU build inserts; otherwise refimpl answers as the CPU
wheel. :func:`op_supported_infos` states the rule in one place.

Differences: Paddle accepts any op name in a custom list (it never warns or
raises); refimpl raises ``InvalidArgument`` naming the list and the op when a
name is no op type it knows (its registry, or any op of Paddle's AMP lists) —
a misspelt op would otherwise change nothing, silently.
"""
from __future__ import annotations

import copy
from typing import Any, Iterable, Optional, Sequence, Set, Tuple

from refimpl.core.dtypes import convert_dtype
from refimpl.core.errors import InvalidArgument
from refimpl.ops.registry import OPS

__all__ = ["AutoMixedPrecisionLists", "CustomOpLists", "check_amp_dtype", "get_low_precision_vartype",
           "get_low_precision_dtypestr", "op_supported_infos", "white_list", "black_list", "gray_list"]

# ---- paddle/amp/amp_lists.py (3.3.1) ---------------------------------------------------
WHITE_LIST = {"conv2d", "einsum", "matmul", "matmul_v2", "linear_v2", "max_pool2d_with_index", "mul",
              "fused_gemm_epilogue", "fused_rotary_position_embedding", "flash_attn"}
ONLY_FP16_WHITE_LIST = {"fake_quantize_dequantize_abs_max", "fake_quantize_dequantize_moving_average_abs_max",
                        "fused_attention", "fused_feedforward"}
FP16_WHITE_LIST = WHITE_LIST | ONLY_FP16_WHITE_LIST
FP16_BLACK_LIST = {
    "tan", "acos", "asin", "sinh", "cosh", "atanh", "tanh_shrink", "erfinv", "exp", "expm1", "log", "log10",
    "log2", "reciprocal", "rsqrt", "pow", "square", "reduce_sum", "mean", "reduce_mean", "reduce_prod",
    "cumprod", "cumsum", "dist", "pnorm", "frobenius_norm", "renorm", "group_norm", "layer_norm", "softmax",
    "softmin", "softplus", "log_softmax", "softmax_with_cross_entropy", "sigmoid_cross_entropy_with_logits",
    "c_softmax_with_cross_entropy", "c_softmax_with_multi_label_cross_entropy", "cross_entropy",
    "cross_entropy2", "nll_loss", "huber_loss", "triplet_margin_loss", "log_loss", "hsigmoid_loss",
    "margin_cross_entropy"}
EXTRA_BLACK_LIST = {"linear_interp_v2", "nearest_interp_v2", "bilinear_interp_v2", "bicubic_interp_v2",
                    "trilinear_interp_v2", "lookup_table", "lookup_table_v2", "scatter"}
BF16_WHITE_LIST = WHITE_LIST
BF16_BLACK_LIST = FP16_BLACK_LIST

# ---- static/amp/fp16_lists.py ------------------------------------------------------------
black_list = FP16_BLACK_LIST
white_list = FP16_WHITE_LIST
_extra_black_list = EXTRA_BLACK_LIST
_only_supported_fp16_list = {"resnet_unit", "fused_bn_add_activation"}

# ops that are numerically safe in low precision but follow their inputs (Paddle's "gray" list)
gray_list = {
    "elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div", "elementwise_max",
    "elementwise_min", "elementwise_pow", "elementwise_mod", "elementwise_floordiv", "batch_norm", "layer_norm",
    "tanh", "sigmoid", "top_k", "pool2d", "pool3d", "dropout", "relu", "relu6", "leaky_relu", "soft_relu",
    "flatten2", "stack", "unstack", "uniform_random", "uniform_random_batch_size_like", "gaussian_random",
    "slice", "rank", "scale", "transpose2", "reshape2", "gather", "fill_constant",
    "get_tensor_from_selected_rows", "sign", "cast", "fused_bn_add_activation", "c_identity", "c_concat",
    "all_reduce", "concat", "split", "fused_feedforward", "fused_attention", "fused_multi_transformer"}

# ops that _get_sys_unsupported_list never counts as unsupported (control flow and casts)
_ALWAYS_SUPPORTED = {"conditional_block", "conditional_block_infer", "select_input", "while", "cast",
                     "tensor_array_to_tensor", "lod_array_length", "write_to_array"}

_LOW_PRECISION = ("float16", "bfloat16")


def check_amp_dtype(dtype: Any) -> str:
    """'float16' or 'bfloat16' (any case); Paddle's ValueError text otherwise."""
    if isinstance(dtype, str):
        dtype = dtype.lower()
    if dtype not in _LOW_PRECISION:
        raise InvalidArgument("If enable AMP, dtype should be 'float16' or 'bfloat16'.")
    return dtype


def get_low_precision_vartype(dtype: Any) -> str:
    """The low-precision dtype (refimpl's dtype name, which is what ``VarDesc.VarType.FP16`` is)."""
    if isinstance(dtype, str) and dtype.lower() not in ("float16", "bfloat16"):
        raise InvalidArgument("If enable AMP, dtype should be 'float16' or 'bfloat16'.")
    if not isinstance(dtype, (str, int)) or isinstance(dtype, bool):
        raise InvalidArgument(f"The type of dtype is expected to be string or core.VarDesc.VarType, "
                              f"but received {type(dtype)}.")
    name = convert_dtype(dtype.lower() if isinstance(dtype, str) else dtype)
    if name not in _LOW_PRECISION:
        raise InvalidArgument("If enable AMP, dtype should be core.VarDesc.VarType.FP16 or "
                              "core.VarDesc.VarType.BF16.")
    return name


get_low_precision_dtypestr = get_low_precision_vartype  # names and dtypes are one thing in refimpl


def op_supported_infos(device: str, dtype: Any) -> Tuple[Set[str], Set[str], Set[str]]:
    """Paddle's ``core.op_supported_infos(device, dtype)``: (all op types, supported, unsupported).

    Only the question AMP asks is answered: which ops have a kernel of a
    low-precision ``dtype`` on ``device`` "GPU". See the module docstring:
    with refimpl's CUDA backend on, the ops it has CUDA kernels for; without
    it none, as on Paddle's CPU wheel.
    """
    if device != "GPU":
        raise InvalidArgument(f"op_supported_infos: refimpl answers only for device 'GPU', got {device!r}")
    get_low_precision_vartype(dtype)
    all_ops = set(OPS)
    supported: Set[str] = set()
    from refimpl.base.core import is_compiled_with_cuda  # (lazily: refimpl.base loads after refimpl.static)
    if is_compiled_with_cuda():
        from refimpl.executor.backend import ensure
        ensure("cuda")  # registers the CUDA kernels
        supported = {t for t, d in OPS.items() if "cuda" in d.kernels}
    return all_ops, supported, all_ops - supported


def _get_sys_unsupported_list(dtype: Any) -> Tuple[str, Set[str], Set[str]]:
    all_ops, _, unsupported = op_supported_infos("GPU", dtype)
    return "GPU", unsupported - _ALWAYS_SUPPORTED, all_ops


def _get_white_list(dtype: str) -> Set[str]:
    return set(FP16_WHITE_LIST) | (_only_supported_fp16_list if dtype == "float16" else set())


def _get_black_list() -> Set[str]:
    return set(FP16_BLACK_LIST) | EXTRA_BLACK_LIST


def known_op_names() -> Set[str]:
    """Op types a custom list may name: refimpl's registry and every op of Paddle's AMP lists."""
    from .bf16.amp_lists import bf16_initializer_list, cpu_bf16_supported
    return (set(OPS) | FP16_WHITE_LIST | FP16_BLACK_LIST | EXTRA_BLACK_LIST | gray_list
            | _only_supported_fp16_list | bf16_initializer_list | cpu_bf16_supported)


def check_op_names(owner: str, list_name: str, names: Optional[Iterable[str]]) -> None:
    """InvalidArgument naming ``owner``, ``list_name`` and the first name that is no known op type."""
    if names is None:
        return
    if isinstance(names, str):
        raise InvalidArgument(f"{owner}: {list_name} must be a set or list of op types, got the string {names!r}")
    known = known_op_names()
    for name in names:
        if name not in known:
            raise InvalidArgument(f"{owner}: {list_name} names op {name!r}, which is no op type refimpl or "
                                  f"Paddle's AMP lists know")


def refuse_overlap(first: Optional[Iterable[str]], second: Optional[Iterable[str]], message: str) -> None:
    """InvalidArgument (``message`` formatted with the op) when an op is in both custom lists."""
    shared = [name for name in (first or ()) if name in set(second or ())]
    if shared:
        raise InvalidArgument(message.format(shared[0]))


def move_custom_ops(names: Optional[Iterable[str]], into: Set[str], out_of: Sequence[Set[str]],
                    also_into: Sequence[Set[str]] = ()) -> None:
    """Each of ``names`` leaves the first list of ``out_of`` that holds it and joins ``into`` (and
    ``also_into``): how a custom list overrides the default ones."""
    for name in names or ():
        holder = next((lst for lst in out_of if name in lst), None)
        if holder is not None:
            holder.discard(name)
        into.add(name)
        for extra in also_into:
            extra.add(name)


class AutoMixedPrecisionLists:
    """White / black / gray op lists for AMP, updated by the custom lists (Paddle's class).

    ``white_list`` ops run in low precision, ``black_list`` ops in float32,
    ``gray_list`` ops follow their inputs; ``unsupported_list`` ops have no
    low-precision kernel on the device; ``black_varnames`` keeps every op
    touching one of those variables in float32.
    """

    def __init__(self, custom_white_list: Optional[Iterable[str]] = None,
                 custom_black_list: Optional[Iterable[str]] = None,
                 custom_black_varnames: Optional[Iterable[str]] = None, dtype: str = "float16") -> None:
        self.amp_dtype = check_amp_dtype(dtype)
        for list_name, names in (("custom_white_list", custom_white_list), ("custom_black_list", custom_black_list)):
            check_op_names("AutoMixedPrecisionLists", list_name, names)
        # fresh copies of the defaults for this dtype and device, which the custom lists then edit
        self.white_list, self.black_list = _get_white_list(self.amp_dtype), _get_black_list()
        self.gray_list = set(gray_list)
        _, unsupported, all_ops = _get_sys_unsupported_list(self.amp_dtype)
        self.unsupported_list, self.all_list = set(unsupported), set(all_ops)
        self.black_varnames = copy.copy(custom_black_varnames)
        self._custom_white_list, self._custom_black_list = custom_white_list, custom_black_list
        self._update_list()

    def _update_list(self) -> None:
        """Move the custom ops into the white / black list, as Paddle's ``_update_list``."""
        refuse_overlap(self._custom_white_list, self._custom_black_list,
                       "The given custom_white_list overlaps custom_black_list with < {} >!")
        move_custom_ops(self._custom_white_list, into=self.white_list, out_of=(self.black_list, self.gray_list))
        move_custom_ops(self._custom_black_list, into=self.black_list, out_of=(self.white_list, self.gray_list),
                        also_into=(self.unsupported_list,))


def od_lists(dtype: str) -> AutoMixedPrecisionLists:
    """Level OD's lists: the default white ops run in low precision, every other op is black."""
    lists = AutoMixedPrecisionLists(dtype=dtype)
    lists.black_list = lists.all_list - lists.white_list
    return lists


CustomOpLists = AutoMixedPrecisionLists
