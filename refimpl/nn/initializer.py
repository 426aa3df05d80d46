"""Initializers: the startup-program ops that give parameters their first values.

Mirrors ``paddle.nn.initializer`` in static mode: calling an initializer on
``(var, block)`` appends one op to ``block`` (the startup program) that
writes ``var``: ``fill_constant`` for Constant, ``uniform_random`` /
``gaussian_random`` for Uniform, Normal and the Xavier variants (with
Paddle's fan-in/fan-out rule and limits). After ``paddle.seed(n)`` the values
are Paddle's CPU numbers bit for bit (``refimpl/core/random.py``); a zero ``seed`` takes the
program's ``random_seed`` (``Program.global_seed``), as Paddle's initializers do.

Low-precision parameters are drawn as Paddle 3.3.1 draws them: Uniform and the
Xavier variants fill a float16 parameter (Xavier normal: bfloat16 too) through a
float32 temporary (``uniform_random.<param>.tmp_k`` / ``xavier_init.<param>.tmp_k``)
and a ``cast``; Normal and Constant write the parameter's dtype directly.
"""
import math

from refimpl.core.dtypes import to_vartype


def _fans(shape):
    shape = list(shape)
    if not shape:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    rf = 1
    for d in shape[2:]:
        rf *= d
    return shape[1] * rf, shape[0] * rf


def _drawn_in_float32(var, block, prefix, draw):
    """``draw(target)`` appends the random op; a float32 temporary and a cast stand between it and ``var``."""
    from refimpl.framework import unique_name
    tmp = block.create_var(name=unique_name.generate(f"{prefix}.{var.name}.tmp"), shape=list(var.shape),
                           dtype="float32", persistable=False)
    op = draw(tmp)
    block.append_op(type="cast", inputs={"X": [tmp]}, outputs={"Out": [var]},
                    attrs={"in_dtype": to_vartype("float32"), "out_dtype": to_vartype(var.dtype)})
    var.op = op
    return op


class Initializer:
    def __call__(self, var, block):
        return self.forward(var, block)


class Constant(Initializer):
    def __init__(self, value=0.0, force_cpu=False):
        self._value, self._force_cpu = value, force_cpu

    def forward(self, var, block):
        op = block.append_op(type="fill_constant", outputs={"Out": var},
                             attrs={"shape": list(var.shape), "dtype": to_vartype(var.dtype),
                                    "value": float(self._value), "str_value": str(float(self._value)),
                                    "force_cpu": self._force_cpu})
        var.op = op
        return op


class Uniform(Initializer):
    def __init__(self, low=-1.0, high=1.0, seed=0):
        self._low, self._high, self._seed = low, high, seed

    def forward(self, var, block, prefix="uniform_random"):
        def draw(out):
            return block.append_op(type="uniform_random", inputs={}, outputs={"Out": out},
                                   attrs={"shape": list(var.shape), "dtype": to_vartype(out.dtype),
                                          "min": float(self._low), "max": float(self._high),
                                          "seed": self._seed or block.program.random_seed})
        if var.dtype == "float16":
            return _drawn_in_float32(var, block, prefix, draw)
        op = draw(var)
        var.op = op
        return op


class Normal(Initializer):
    def __init__(self, mean=0.0, std=1.0, seed=0):
        self._mean, self._std, self._seed = mean, std, seed

    def forward(self, var, block, through_float32=False):
        def draw(out):
            return block.append_op(type="gaussian_random", outputs={"Out": out},
                                   attrs={"shape": list(var.shape), "dtype": to_vartype(out.dtype),
                                          "mean": float(self._mean), "std": float(self._std),
                                          "seed": self._seed or block.program.random_seed})
        if through_float32:
            return _drawn_in_float32(var, block, "xavier_init", draw)
        op = draw(var)
        var.op = op
        return op


class _Xavier(Initializer):
    def __init__(self, fan_in=None, fan_out=None, gain=1.0, seed=0):
        self._fan_in, self._fan_out, self._gain, self._seed = fan_in, fan_out, gain, seed

    def _fans(self, var):
        fi, fo = _fans(var.shape)
        return (self._fan_in if self._fan_in is not None else fi,
                self._fan_out if self._fan_out is not None else fo)


class XavierUniform(_Xavier):
    """U(-limit, limit) with limit = gain * sqrt(6 / (fan_in + fan_out))."""

    def forward(self, var, block):
        fi, fo = self._fans(var)
        limit = 0.0 if 0 in (fi, fo) else self._gain * math.sqrt(6.0 / float(fi + fo))
        return Uniform(-limit, limit, self._seed).forward(var, block, prefix="xavier_init")


class XavierNormal(_Xavier):
    """N(0, std) with std = gain * sqrt(2 / (fan_in + fan_out))."""

    def forward(self, var, block):
        fi, fo = self._fans(var)
        std = 0.0 if 0 in (fi, fo) else self._gain * math.sqrt(2.0 / float(fi + fo))
        return Normal(0.0, std, self._seed).forward(var, block, var.dtype in ("float16", "bfloat16"))


XavierInitializer = XavierUniform
ConstantInitializer = Constant

from refimpl.framework import namespace_getattr as _namespace_getattr  # noqa: E402
__getattr__ = _namespace_getattr(__name__)  # a Paddle name refimpl lacks: Unimplemented, naming it
