"""``paddle.base.layers``: what survives of fluid's layers in Paddle 3.3.1.

Paddle 3.3.1 keeps only ``layers.io`` and ``layers.math_op_patch`` there
(``python/paddle/base/layers/``); the operator overloads of static Variables
are ``refimpl.tensor.patch``, re-exported as ``math_op_patch``. Every other
name raises Unimplemented naming ``paddle.base.layers.<name>``.
"""
from refimpl.framework import namespace_getattr
from refimpl.tensor import patch as math_op_patch

__all__ = ["math_op_patch"]

__getattr__ = namespace_getattr(__name__)
