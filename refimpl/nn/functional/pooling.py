"""2-D pooling in static mode: max_pool2d, avg_pool2d, adaptive_avg_pool2d (``paddle/nn/functional/pooling.py``).

Each appends one ``pool2d`` op (helper ``pool2d``, so outputs are ``pool2d_N.tmp_0``) with the
attrs Paddle's static branch sets: ``max_pool2d`` / ``avg_pool2d`` pass ``use_cudnn=True`` and
``global_pooling=False``, the stride defaults to the kernel size, and padding follows conv's
rules (int, 2, 4, per-dim pairs, "SAME" / "VALID"); ``adaptive_avg_pool2d`` passes only
``pooling_type``, ``ksize`` (the output size), ``adaptive`` and ``data_format``, the rest keep the
op's defaults. ``avg_pool2d(divisor_override=d)`` multiplies the result by ``KH * KW`` and then
divides it by ``d`` (two ``scale`` ops), as Paddle does.

Differences: ``max_pool2d(return_mask=True)`` needs ``max_pool2d_with_index``, which refimpl does
not have (Unimplemented); a kernel larger than the padded input raises here when the program is
built (Paddle 3.3.1 builds it, its C++ output-size formula truncating to a size of 1).
"""
from __future__ import annotations

from typing import Any, Optional

from refimpl.core.errors import InvalidArgument, Unimplemented
from refimpl.framework.variable import Variable
from refimpl.static.layer_helper import LayerHelper

from .conv import check_data_format, check_input, to_list, update_padding

__all__ = ['max_pool2d', 'avg_pool2d', 'adaptive_avg_pool2d']


def _pool_sizes(api: str, kernel_size: Any, stride: Any):
    ksize = to_list(api, "kernel_size", kernel_size, 2)
    strides = ksize if stride is None else to_list(api, "stride", stride, 2)
    for arg, vals in (("kernel_size", ksize), ("stride", strides)):
        if min(vals) <= 0:
            raise InvalidArgument(f"{api}: {arg} must be > 0, got {vals}")
    return ksize, strides


def _pool_padding(api: str, padding: Any, channel_last: bool, ceil_mode: bool):
    paddings, algo = update_padding(api, padding, channel_last)
    if algo == "VALID" and ceil_mode:
        raise InvalidArgument(f"{api}: ceil_mode must be False when padding is 'VALID'")
    return paddings, algo


def _check_fits(api: str, x: Variable, ksize, paddings, algo: str, channel_last: bool) -> None:
    """The kernel must not be larger than the (explicitly) padded input."""
    if algo != "EXPLICIT":
        return
    hw = x.shape[1:3] if channel_last else x.shape[2:4]
    pads = paddings if len(paddings) == 4 else [paddings[0], paddings[0], paddings[1], paddings[1]]
    for i in range(2):
        padded = hw[i] + pads[2 * i] + pads[2 * i + 1]
        if hw[i] != -1 and ksize[i] > padded:
            raise InvalidArgument(f"{api}: kernel_size {ksize} is larger than the padded input "
                                  f"({padded} along spatial dim {i}) of x {x.name!r} of shape {list(x.shape)}")


def _append_pool(x: Variable, attrs: dict, name: Optional[str]) -> Variable:
    helper = LayerHelper("pool2d", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="pool2d", inputs={"X": x}, outputs={"Out": out}, attrs=attrs)
    return out


def _windowed_pool(api: str, pooling_type: str, x, kernel_size, stride, padding, ceil_mode, exclusive,
                   data_format, name):
    ksize, strides = _pool_sizes(api, kernel_size, stride)
    channel_last = check_data_format(api, data_format)
    paddings, algo = _pool_padding(api, padding, channel_last, ceil_mode)
    check_input(api, x, 4)
    _check_fits(api, x, ksize, paddings, algo, channel_last)
    return _append_pool(x, {"pooling_type": pooling_type, "ksize": ksize, "global_pooling": False,
                            "strides": strides, "paddings": paddings, "padding_algorithm": algo,
                            "use_cudnn": True, "ceil_mode": bool(ceil_mode), "exclusive": bool(exclusive),
                            "data_format": data_format}, name)


def max_pool2d(x: Variable, kernel_size: Any, stride: Any = None, padding: Any = 0, return_mask: bool = False,
               ceil_mode: bool = False, data_format: str = "NCHW", name: Optional[str] = None) -> Variable:
    """The maximum over each kernel window (op ``pool2d``, pooling_type "max")."""
    if return_mask:
        if data_format == "NHWC":
            raise InvalidArgument("max_pool2d: return_mask=True needs data_format 'NCHW', got 'NHWC'")
        raise Unimplemented("max_pool2d: return_mask=True (op max_pool2d_with_index) is not supported")
    return _windowed_pool("max_pool2d", "max", x, kernel_size, stride, padding, ceil_mode, True,
                          data_format, name)


def avg_pool2d(x: Variable, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               exclusive: bool = True, divisor_override: Optional[float] = None, data_format: str = "NCHW",
               name: Optional[str] = None) -> Variable:
    """The mean over each kernel window (op ``pool2d``, pooling_type "avg")."""
    out = _windowed_pool("avg_pool2d", "avg", x, kernel_size, stride, padding, ceil_mode, exclusive,
                         data_format, name)
    if divisor_override is None:
        return out
    if isinstance(divisor_override, bool) or not isinstance(divisor_override, (int, float)) or not divisor_override:
        raise InvalidArgument(f"avg_pool2d: divisor_override must be a non-zero number, got {divisor_override!r}")
    ksize = to_list("avg_pool2d", "kernel_size", kernel_size, 2)
    return out * (ksize[0] * ksize[1]) / divisor_override


def adaptive_avg_pool2d(x: Variable, output_size: Any, data_format: str = "NCHW",
                        name: Optional[str] = None) -> Variable:
    """Average pooling to a fixed ``output_size`` (op ``pool2d`` with ``adaptive=True``)."""
    api = "adaptive_avg_pool2d"
    channel_last = check_data_format(api, data_format)
    check_input(api, x, 4)
    in_hw = x.shape[1:3] if channel_last else x.shape[2:4]
    if isinstance(output_size, int) and not isinstance(output_size, bool):
        size = [output_size, output_size]
    elif isinstance(output_size, (list, tuple)) and len(output_size) == 2:
        size = [in_hw[i] if s is None else s for i, s in enumerate(output_size)]
    else:
        raise InvalidArgument(f"{api}: output_size must be an int or a list of 2, got {output_size!r}")
    if not all(isinstance(s, int) and s > 0 for s in size):
        raise InvalidArgument(f"{api}: output_size must be ints > 0 (None keeps the input size), got "
                              f"{output_size!r} for x {x.name!r} of shape {list(x.shape)}")
    return _append_pool(x, {"pooling_type": "avg", "ksize": size, "adaptive": True, "data_format": data_format},
                        name)
