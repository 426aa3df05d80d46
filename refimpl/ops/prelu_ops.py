"""Parametric ReLU: prelu and prelu_grad.

Mirrors Paddle 3.3.1's op (CPU kernels ``paddle/phi/kernels/cpu/prelu_kernel.cc``,
``prelu_grad_kernel.cc``; shapes ``PReluInferMeta`` in ``paddle/phi/infermeta/binary.cc``).

``prelu``: X, Alpha -> Out; attrs data_format (``NCHW`` / ``NHWC``, read in mode channel only),
mode (``all``: one alpha; ``channel``: one per channel, C = dim 1 or the last dim; ``element``: one
per element of a sample, ``numel(X) / N`` of them). ``out = x > 0 ? x : alpha * x``; Alpha is read flat (its shape only has
to hold the right number of values, as in Paddle). ``prelu_grad`` reads X, Alpha, Out@GRAD:
``dx = x > 0 ? dout : alpha * dout`` and ``d_alpha`` the sums of ``x > 0 ? 0 : x * dout`` over the
elements that share an alpha, added in memory order from zero (Paddle's loop).
"""
from typing import Tuple

import numpy as np

from refimpl.core.errors import InvalidArgument

from .common import check_choice, first, grads_like
from .grad_maker import simple_grad
from .registry import register_op

__all__ = ["alpha_index_view", "check_prelu"]

_ATTRS = {"data_format": "NCHW", "mode": "all"}
_MODES = ("all", "channel", "element")


def _numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if all(d >= 0 for d in shape) else -1


def check_prelu(op: str, x_shape, alpha_shape, mode: str, data_format: str) -> None:
    """Paddle's PReluInferMeta checks: the mode, the layout and Alpha's size for the mode."""
    check_choice(op, "mode", mode, _MODES)
    x_shape, size = tuple(x_shape), _numel(alpha_shape)
    if mode == "all":
        want, what = 1, "one"
    elif mode == "channel":
        check_choice(op, "data_format", data_format, ("NCHW", "NHWC"))
        if len(x_shape) < 2:
            raise InvalidArgument(f"{op}: for mode 'channel' X must be at least 2-D, got shape {list(x_shape)}")
        want = x_shape[1] if data_format == "NCHW" else x_shape[-1]
        what = f"the number of channels of X ({want})"
    else:
        if len(x_shape) < 1:
            raise InvalidArgument(f"{op}: for mode 'element' X must be at least 1-D, got shape {list(x_shape)}")
        want = _numel(x_shape[1:])
        what = f"the size of one sample of X ({want})"
    if size >= 0 and want >= 0 and size != want:
        raise InvalidArgument(f"{op}: for mode {mode!r}, the size of Alpha must be {what}, but Alpha has "
                              f"shape {list(alpha_shape)} (size {size}); X has shape {list(x_shape)}")


def _infer(ins, attrs):
    shape, dt = first(ins, "X")
    check_prelu("prelu", shape, first(ins, "Alpha")[0], attrs["mode"], attrs["data_format"])
    return {"Out": (tuple(shape), dt)}


def alpha_index_view(x: np.ndarray, mode: str, data_format: str) -> Tuple[np.ndarray, tuple]:
    """``x`` as (alphas, elements sharing one alpha in memory order), and the shape that broadcasts a
    flat Alpha against ``x``."""
    if mode == "all":
        return x.reshape(1, -1), (1,) * x.ndim
    if mode == "element":
        return x.reshape(x.shape[0], -1).T, (1,) + tuple(x.shape[1:])
    if data_format == "NCHW":
        c = x.shape[1]
        return x.reshape(x.shape[0], c, -1).transpose(1, 0, 2).reshape(c, -1), (1, c) + (1,) * (x.ndim - 2)
    c = x.shape[-1]
    return x.reshape(-1, c).T, (1,) * (x.ndim - 1) + (c,)


@register_op("prelu", ["X", "Alpha"], ["Out"], _ATTRS, infer_shape=_infer,
             grad=simple_grad("prelu_grad", ["X", "Alpha", "Out@GRAD"], ["X@GRAD", "Alpha@GRAD"]))
def prelu(X: np.ndarray, Alpha: np.ndarray, *, data_format: str, mode: str) -> np.ndarray:
    check_prelu("prelu", X.shape, Alpha.shape, mode, data_format)
    a = Alpha.reshape(alpha_index_view(X, mode, data_format)[1])
    return np.where(X > 0, X, a * X)


@register_op("prelu_grad", ["X", "Alpha", "Out@GRAD"], ["X@GRAD", "Alpha@GRAD"], _ATTRS,
             infer_shape=grads_like(**{"X@GRAD": "X", "Alpha@GRAD": "Alpha"}))
def prelu_grad(X: np.ndarray, Alpha: np.ndarray, dOut: np.ndarray, *, data_format: str, mode: str,
               need: Tuple[bool, bool]) -> Tuple:
    check_prelu("prelu_grad", X.shape, Alpha.shape, mode, data_format)
    T = X.dtype.type
    _, bshape = alpha_index_view(X, mode, data_format)
    pos = X > 0
    dx = da = None
    if need[0]:
        dx = np.where(pos, dOut, Alpha.reshape(bshape) * dOut)
    if need[1]:
        terms = alpha_index_view(np.where(pos, T(0), X * dOut), mode, data_format)[0]
        if terms.shape[1]:
            da = np.cumsum(terms, axis=1, dtype=X.dtype)[:, -1] + T(0)
        else:
            da = np.zeros(terms.shape[0], X.dtype)
        da = da.reshape(Alpha.shape)
    return dx, da
