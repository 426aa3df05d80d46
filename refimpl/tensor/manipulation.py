"""``paddle.reshape``, ``transpose``, ``concat``, ``split``, ``cast`` in static mode."""
from refimpl.core.dtypes import convert_dtype, to_vartype
from refimpl.core.errors import InvalidArgument
from refimpl.static.layer_helper import LayerHelper

from .math import _var

__all__ = ['cast', 'concat', 'reshape', 'split', 'transpose']


def reshape(x, shape, name=None):
    _var(x, "reshape")
    if not isinstance(shape, (list, tuple)) or not all(isinstance(d, int) for d in shape):
        raise InvalidArgument(f"reshape: shape must be a list of ints, got {shape!r}")
    helper = LayerHelper("reshape2", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    xshape = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="reshape2", inputs={"X": x}, outputs={"Out": out, "XShape": xshape},
                     attrs={"shape": list(shape)})
    return out


def transpose(x, perm, name=None):
    _var(x, "transpose")
    if sorted(perm) != list(range(len(x.shape))):
        raise InvalidArgument(f"transpose: perm {list(perm)} is not a permutation of {len(x.shape)} dims")
    helper = LayerHelper("transpose", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    xshape = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="transpose2", inputs={"X": [x]}, outputs={"Out": [out], "XShape": [xshape]},
                     attrs={"axis": list(perm)})
    return out


def concat(x, axis=0, name=None):
    xs = list(x)
    for v in xs:
        _var(v, "concat")
    helper = LayerHelper("concat", name=name)
    out = helper.create_variable_for_type_inference(xs[0].dtype)
    helper.append_op(type="concat", inputs={"X": xs}, outputs={"Out": [out]}, attrs={"axis": axis})
    return out


def split(x, num_or_sections, axis=0, name=None):
    _var(x, "split")
    helper = LayerHelper("split", name=name)
    if isinstance(num_or_sections, int):
        num, sections, n = num_or_sections, [], num_or_sections
    else:
        num, sections, n = 0, list(num_or_sections), len(num_or_sections)
    outs = [helper.create_variable_for_type_inference(x.dtype) for _ in range(n)]
    helper.append_op(type="split", inputs={"X": x}, outputs={"Out": outs},
                     attrs={"num": num, "sections": sections, "axis": axis})
    return outs


def cast(x, dtype):
    _var(x, "cast")
    helper = LayerHelper("cast")
    out = helper.create_variable_for_type_inference(convert_dtype(dtype))
    helper.append_op(type="cast", inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"in_dtype": to_vartype(x.dtype), "out_dtype": to_vartype(dtype)})
    return out
