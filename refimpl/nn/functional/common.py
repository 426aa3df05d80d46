"""``paddle.nn.functional.common`` in static mode: dropout, linear, pad (``paddle/nn/functional/common.py``).

``pad`` as Paddle's static branch: constant mode with a list of pads not of length
``2 * (rank - 2)`` becomes one ``pad`` op over every dim (the list, last dim first unless it names
every dim and ``pad_from_left_axis``, is padded with zeros to ``2 * rank`` values); otherwise a
3-D / 4-D input is unsqueezed to 5-D (``unsqueeze2``), padded by ``pad3d`` in NCDHW / NDHWC and
squeezed back (``squeeze2``). A pad given as a tensor is not supported here, nor is ``dropout``
with an ``axis`` (Paddle's ``dropout_nd`` path) or a Variable ``p``: both are Unimplemented.
"""
import numbers

from refimpl.core.errors import InvalidArgument, Unimplemented
from refimpl.framework.variable import Variable
from refimpl.static.layer_helper import LayerHelper
from refimpl.tensor.math import check_variable

__all__ = ['dropout', 'linear', 'pad']


def dropout(x, p=0.5, axis=None, training=True, mode="upscale_in_train", name=None):
    """Op ``dropout`` (helper ``dropout``); checks in Paddle's order: p, then mode, then axis."""
    check_variable(x, "dropout")
    if isinstance(p, Variable):
        raise Unimplemented(f"dropout: p given as the Variable {p.name!r} is not built; pass a Python number")
    if isinstance(p, bool) or not isinstance(p, numbers.Real):
        raise InvalidArgument(f"dropout: p must be a number, got {p!r} ({type(p).__name__})")
    if p == 0:  # Paddle returns x itself for p == 0, in training and in inference alike
        return x
    if not 0 <= p <= 1:
        raise InvalidArgument(f"dropout: p must be in [0, 1], got {p}")
    impl = {"upscale_in_train": "upscale_in_train", "downscale_in_infer": "downgrade_in_infer"}.get(mode)
    if impl is None:
        raise InvalidArgument(f"dropout: mode must be 'upscale_in_train' or 'downscale_in_infer', got {mode!r}")
    if axis is not None:  # Paddle's dropout_nd path (uniform mask of the kept dims, multiply), not built here
        raise Unimplemented(f"F.dropout(axis=...): dropout along axis {axis!r} of x {x.name!r} is not built; "
                            f"use axis=None")
    helper = LayerHelper("dropout", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    mask = helper.create_variable_for_type_inference("uint8", stop_gradient=True)
    attrs = {"dropout_prob": float(p), "is_test": not training, "dropout_implementation": impl}
    seed = helper.main_program.random_seed
    if seed:  # as Paddle: a program's random_seed fixes the op's seed (extra attrs fix_seed / seed)
        attrs.update(fix_seed=True, seed=int(seed))
    helper.append_op(type="dropout", inputs={"X": [x]}, outputs={"Out": [out], "Mask": [mask]}, attrs=attrs)
    return out


def linear(x, weight, bias=None, name=None):
    """x @ weight (+ bias): ``matmul_v2`` then ``elementwise_add`` (helper ``linear``)."""
    check_variable(x, "linear")
    helper = LayerHelper("linear", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="matmul_v2", inputs={"X": x, "Y": weight}, outputs={"Out": out},
                     attrs={"trans_x": False, "trans_y": False})
    if bias is None:
        return out
    res = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="elementwise_add", inputs={"X": [out], "Y": [bias]}, outputs={"Out": [res]},
                     attrs={"axis": -1})
    return res


_PAD_FORMATS = {3: ("NCL", "NLC"), 4: ("NCHW", "NHWC"), 5: ("NCDHW", "NDHWC")}


def _pad_op(x, pad, value, pad_from_left_axis, name):
    """One ``pad`` op; Paddle's ``paddings`` run from dim 0, the user's list from the last dim."""
    nd = len(x.shape)
    if len(pad) > 2 * nd:
        raise InvalidArgument(f"pad: {len(pad)} pads for the {nd}-D x {x.name!r}, at most {2 * nd}")
    paddings = list(pad) + [0] * (2 * nd - len(pad))
    if not (len(pad) == 2 * nd and pad_from_left_axis):
        paddings = [paddings[i - 1] if i % 2 else paddings[i + 1] for i in range(2 * nd - 1, -1, -1)]
    helper = LayerHelper("pad", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="pad", inputs={"X": x}, outputs={"Out": out},
                     attrs={"paddings": paddings, "pad_value": float(value)})
    return out


def pad(x, pad, mode="constant", value=0.0, data_format=None, pad_from_left_axis=True, name=None):
    """Pad x: ``pad`` lists (before, after) pairs from the last dim on; modes constant / reflect /
    replicate / circular (ops ``pad`` or ``unsqueeze2`` + ``pad3d`` + ``squeeze2``)."""
    check_variable(x, "pad")
    if mode not in ("reflect", "replicate", "constant", "circular"):
        raise InvalidArgument(f"pad: mode must be one of constant, reflect, replicate, circular, got {mode!r}")
    if not isinstance(pad, (list, tuple)) or not all(isinstance(p, int) and not isinstance(p, bool) for p in pad):
        raise InvalidArgument(f"pad: pad must be a list of ints, got {pad!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"pad: value must be a number, got {value!r}")
    nd = len(x.shape)
    if mode == "constant" and len(pad) != (nd - 2) * 2:
        return _pad_op(x, list(pad), value, pad_from_left_axis, name)
    if nd not in _PAD_FORMATS:
        raise InvalidArgument(f"pad: x {x.name!r} must be 3-D, 4-D or 5-D for mode {mode!r} with "
                              f"{len(pad)} pads, got shape {list(x.shape)}")
    fmt = _PAD_FORMATS[nd][0] if data_format is None else str(data_format).upper()
    if fmt not in _PAD_FORMATS[nd]:
        raise InvalidArgument(f"pad: data_format of the {nd}-D x {x.name!r} must be one of "
                              f"{list(_PAD_FORMATS[nd])}, got {data_format!r}")
    if len(pad) != 2 * (nd - 2):
        raise InvalidArgument(f"pad: mode {mode!r} of the {nd}-D x {x.name!r} needs {2 * (nd - 2)} pads, "
                              f"got {list(pad)}")
    from refimpl.tensor.manipulation import squeeze, unsqueeze  # paddle.squeeze / unsqueeze
    channel_last = fmt in ("NLC", "NHWC", "NDHWC")
    pads = [0, 0, 0, 0, *pad] if nd == 3 else [*pad, 0, 0] if nd == 4 else list(pad)
    axes = {3: [2, 3] if channel_last else [3, 4], 4: [1] if channel_last else [2], 5: []}[nd]
    if axes:
        x = unsqueeze(x, axis=axes)
    helper = LayerHelper("pad3d", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="pad3d", inputs={"X": [x]}, outputs={"Out": out},
                     attrs={"mode": mode, "value": float(value), "data_format": "NDHWC" if channel_last else "NCDHW",
                            "paddings": pads})
    return squeeze(out, axis=axes) if axes else out
