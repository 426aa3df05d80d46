"""The op lists of bfloat16 AMP (``paddle.static.amp.bf16``).

Mirrors Paddle 3.3.1's ``python/paddle/static/amp/bf16/amp_lists.py``:
``AutoMixedPrecisionListsBF16`` with its bf16 list (Paddle's white list),
fp32 list (the fp16 black, white and gray lists less the bf16 and gray
ones), gray list, the initializers that may write bf16 directly, and
``unsupported_list``, the ops with no bfloat16 kernel on the CPU.

Paddle computes that last list from its CPU kernel registry
(``core.op_supported_infos('CPU', BF16)``); refimpl has no dtype-keyed kernel
registry, so the op types Paddle 3.3.1's CPU build has a bfloat16 kernel for are
written out below (:data:`cpu_bf16_supported`, recorded with
``core.op_supported_infos('CPU', core.VarDesc.VarType.BF16)[1]``), and every
other registered op is unsupported, as in Paddle. Custom lists are checked as
in ``fp16_lists`` (an unknown op name is InvalidArgument in refimpl; Paddle
accepts it silently).
"""
from __future__ import annotations

from typing import Iterable, Optional

from refimpl.core.errors import InvalidArgument
from refimpl.ops.registry import OPS

from ..fp16_lists import BF16_WHITE_LIST, check_op_names, move_custom_ops, refuse_overlap
from ..fp16_lists import black_list as black_list_fp16, gray_list as gray_list_fp16
from ..fp16_lists import white_list as white_list_fp16

__all__ = ["AutoMixedPrecisionListsBF16"]

# Paddle 3.3.1 (CPU wheel): the op types with a bfloat16 CPU kernel
cpu_bf16_supported = {
    "abs", "abs_grad", "accuracy_check", "argsort", "argsort_grad", "as_strided", "as_strided_grad", "assign",
    "assign_value", "bicubic_interp_v2", "bicubic_interp_v2_grad", "bilinear_interp", "bilinear_interp_grad",
    "bilinear_interp_v2", "bilinear_interp_v2_grad", "cast", "ceil", "ceil_grad", "check_numerics", "clip",
    "clip_grad", "concat", "concat_grad", "conv2d", "conv2d_grad", "conv2d_transpose", "conv2d_transpose_bias",
    "copysign", "copysign_grad", "data", "depthwise_conv2d", "depthwise_conv2d_grad", "dequantize", "diagonal",
    "diagonal_grad", "dropout", "dropout_grad", "elementwise_add", "elementwise_add_grad", "elementwise_div",
    "elementwise_div_grad", "elementwise_floordiv", "elementwise_max", "elementwise_max_grad",
    "elementwise_min", "elementwise_min_grad", "elementwise_mul", "elementwise_mul_grad",
    "elementwise_mul_grad_grad", "elementwise_mul_triple_grad", "elementwise_pow", "elementwise_pow_grad",
    "elementwise_sub", "elementwise_sub_grad", "elementwise_sub_grad_grad", "elu", "elu_grad",
    "embedding_with_scaled_gradient_grad", "empty", "equal", "exp", "exp_grad", "expand_v2", "expand_v2_grad",
    "fc", "feed", "fetch", "fetch_v2", "fill_any", "fill_any_grad", "fill_any_like", "fill_constant",
    "flatten_contiguous_range", "floor", "floor_grad", "fused_conv2d", "fused_elementwise_add",
    "fused_elementwise_div", "fused_elementwise_mul", "fused_elementwise_sub", "fused_matmul",
    "fused_softplus", "fused_transpose", "fusion_gru", "fusion_lstm", "gather", "gather_grad",
    "gaussian_random", "gelu", "gelu_grad", "greater_equal", "greater_than", "hard_swish", "hard_swish_grad",
    "index_elementwise_get", "index_elementwise_get_grad", "index_elementwise_put",
    "index_elementwise_put_grad", "index_elementwise_put_with_tensor",
    "index_elementwise_put_with_tensor_grad", "index_put", "index_put_grad", "index_select",
    "index_select_grad", "index_select_strided", "index_select_strided_grad", "interp_antialias",
    "interp_antialias_grad", "isfinite_v2", "isinf_v2", "isnan_v2", "layer_norm", "leaky_relu",
    "leaky_relu_grad", "less_equal", "less_than", "linear_interp_v2", "linear_interp_v2_grad", "load_combine",
    "log", "log10", "log1p", "log2", "log_softmax", "lookup_table", "lookup_table_grad", "lookup_table_v2",
    "lookup_table_v2_grad", "masked_fill", "masked_fill_grad", "masked_select", "masked_select_grad", "matmul",
    "matmul_grad", "matmul_v2", "matmul_v2_grad", "mean", "mean_grad", "memcpy", "memcpy_d2h", "memcpy_h2d",
    "mish", "mish_grad", "mul", "mul_grad", "nansum", "nansum_grad", "nearest_interp", "nearest_interp_grad",
    "nearest_interp_v2", "nearest_interp_v2_grad", "not_equal", "pad", "pad3d", "pad_grad", "pool2d",
    "pool2d_grad", "prelu", "prelu_grad", "random", "random_grad", "reduce_as", "reduce_as_grad", "reduce_max",
    "reduce_mean", "reduce_mean_grad", "reduce_min", "reduce_sum", "reduce_sum_grad", "relu", "relu6",
    "relu6_grad", "relu_grad", "remainder_grad", "repeat_interleave", "repeat_interleave_grad", "requantize",
    "reshape", "reshape2", "reshape2_grad", "reshape2_grad_grad", "rprop", "save", "save_combine", "scale",
    "set", "set_value", "set_value_grad", "sgd", "shape", "shape64", "share_buffer", "shuffle_channel",
    "sigmoid", "sigmoid_grad", "size", "slice", "slice_grad", "softmax", "softplus", "split", "sqrt",
    "sqrt_grad", "squeeze2", "squeeze2_grad", "stack", "stack_grad", "strided_slice", "strided_slice_grad",
    "sum", "swish", "swish_grad", "tanh", "tanh_grad", "transfer_layout", "transpose2", "transpose2_grad",
    "trilinear_interp_v2", "trilinear_interp_v2_grad", "trunc_divide", "truncated_gaussian_random", "unbind",
    "uniform_random", "uniform_random_batch_size_like", "unsqueeze2", "unsqueeze2_grad", "view_dtype",
    "view_dtype_grad", "view_shape", "view_shape_grad", "view_slice", "weight_quantize", "where_index",
}

bf16_initializer_list = {"fill_constant", "uniform_random"}
bf16_list = set(BF16_WHITE_LIST)  # always bf16
gray_list = set(gray_list_fp16)  # bf16 when the inputs come from bf16 ops
fp32_list = (set(black_list_fp16) | white_list_fp16 | gray_list_fp16) - bf16_list - gray_list


def _unsupported_list() -> set:
    """Registered ops with no CPU bfloat16 kernel in Paddle, less the bf16 and gray lists (as Paddle)."""
    return (set(OPS) - cpu_bf16_supported) - bf16_list - gray_list


class AutoMixedPrecisionListsBF16:
    """bf16 / fp32 / gray op lists, updated by the custom lists (Paddle's class)."""

    def __init__(self, custom_bf16_list: Optional[Iterable[str]] = None,
                 custom_fp32_list: Optional[Iterable[str]] = None,
                 custom_fp32_varnames: Optional[Iterable[str]] = None) -> None:
        for list_name, names in (("custom_bf16_list", custom_bf16_list), ("custom_fp32_list", custom_fp32_list)):
            check_op_names("AutoMixedPrecisionListsBF16", list_name, names)
        # fresh copies of the module's defaults, which the custom lists then edit
        self.bf16_list, self.fp32_list, self.gray_list = set(bf16_list), set(fp32_list), set(gray_list)
        self.bf16_initializer_list = set(bf16_initializer_list)
        self.unsupported_list = _unsupported_list()
        self.fp32_varnames = None if custom_fp32_varnames is None else set(custom_fp32_varnames)
        self._custom_bf16_list, self._custom_fp32_list = custom_bf16_list, custom_fp32_list
        self._update_list()

    def _update_list(self) -> None:
        """A custom bf16 op leaves the fp32 (or gray) list; a custom fp32 op leaves the bf16 (or gray) list
        and counts as unsupported, so pure bf16 keeps it float32."""
        refuse_overlap(self._custom_bf16_list, self._custom_fp32_list,
                       "Custom bf16 list overlap custom fp32 list with < {} >")
        move_custom_ops(self._custom_bf16_list, into=self.bf16_list, out_of=(self.fp32_list, self.gray_list))
        move_custom_ops(self._custom_fp32_list, into=self.fp32_list, out_of=(self.bf16_list, self.gray_list),
                        also_into=(self.unsupported_list,))
