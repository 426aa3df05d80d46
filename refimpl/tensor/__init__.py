"""Tensor functions of the top-level API (``paddle.mean``, ``paddle.reshape``...).

Mirrors ``paddle.tensor``'s legacy static-graph branch: each function makes a
LayerHelper named after the op (``mean_0``, ``reshape2_0``) and appends the
same op with the same attrs. ``patch.py`` adds the Python operators to
Variable, as Paddle's ``math_op_patch`` does.
"""
from .math import add, add_n, divide, exp, log, pow, reciprocal, sqrt, increment, matmul, mean, multiply, scale, square, subtract, sum
from .manipulation import cast, concat, reshape, split, transpose
from . import patch  # noqa: F401
