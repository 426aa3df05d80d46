"""``paddle.nn.functional.common`` in static mode: dropout, linear (``paddle/nn/functional/common.py``)."""
from refimpl.core.errors import InvalidArgument
from refimpl.static.layer_helper import LayerHelper
from refimpl.tensor.math import _var

__all__ = ['dropout', 'linear']


def dropout(x, p=0.5, axis=None, training=True, mode="upscale_in_train", name=None):
    _var(x, "dropout")
    if p == 0:  # Paddle returns x itself for p == 0, in training and in inference alike
        return x
    if not 0 <= p <= 1:
        raise InvalidArgument(f"dropout: p must be in [0, 1], got {p}")
    impl = {"upscale_in_train": "upscale_in_train", "downscale_in_infer": "downgrade_in_infer"}.get(mode)
    if impl is None:
        raise InvalidArgument(f"dropout: mode must be 'upscale_in_train' or 'downscale_in_infer', got {mode!r}")
    helper = LayerHelper("dropout", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    mask = helper.create_variable_for_type_inference("uint8", stop_gradient=True)
    helper.append_op(type="dropout", inputs={"X": [x]}, outputs={"Out": [out], "Mask": [mask]},
                     attrs={"dropout_prob": float(p), "is_test": not training,
                            "dropout_implementation": impl})
    return out


def linear(x, weight, bias=None, name=None):
    """x @ weight (+ bias): ``matmul_v2`` then ``elementwise_add`` (helper ``linear``)."""
    _var(x, "linear")
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
