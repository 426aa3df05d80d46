"""Python operators on static Variables (Paddle's ``math_op_patch``).

``x + y``, ``x - y``, ``x * y``, ``x / y`` with another Variable append
``elementwise_*`` ops (axis -1); with a Python number they append one
``scale`` op; ``x @ y`` appends ``matmul_v2``. Outputs are named ``tmp_k``.
Unlike Paddle, ``==`` keeps Python identity semantics.
"""
from refimpl.framework.variable import Variable

from .math import binary, constant_like, scale


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _make(op_type, scalar_fn, reverse=False):
    def method(self, other):
        if _number(other):
            return scalar_fn(self, float(other))
        if not isinstance(other, Variable):
            return NotImplemented
        return binary(op_type, other, self) if reverse else binary(op_type, self, other)
    return method


Variable.__add__ = Variable.__radd__ = _make("elementwise_add", lambda x, c: scale(x, 1.0, c))
Variable.__sub__ = _make("elementwise_sub", lambda x, c: scale(x, 1.0, -c))
Variable.__rsub__ = _make("elementwise_sub", lambda x, c: scale(x, -1.0, c), reverse=True)
Variable.__mul__ = Variable.__rmul__ = _make("elementwise_mul", lambda x, c: scale(x, c))
Variable.__truediv__ = _make("elementwise_div", lambda x, c: scale(x, 1.0 / c))
Variable.__neg__ = lambda self: scale(self, -1.0)
Variable.__matmul__ = lambda self, other: binary("matmul_v2", self, other, {"trans_x": False, "trans_y": False})


def _pow(self, other):
    if _number(other):
        other = constant_like(self, other, [])
    return binary("elementwise_pow", self, other)


def _rpow(self, other):
    if not _number(other):
        return NotImplemented
    return binary("elementwise_pow", constant_like(self, other, [1]), self)


Variable.__pow__ = _pow
Variable.__rpow__ = _rpow
