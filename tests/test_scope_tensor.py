"""Scope trees and DenseTensor, as Paddle's Python API exposes them."""
import numpy as np
import pytest

import refimpl as paddle
from refimpl.core import DenseTensor, InvalidArgument, NotFound, PreconditionNotMet, Scope


def test_var_creates_locally_and_find_var_walks_up():
    root = Scope()
    kid = root.new_scope()
    root.var("w").get_tensor().set(np.ones((2, 3), "float32"))
    assert kid.find_local_var("w") is None
    assert kid.find_var("w") is root.find_var("w")
    v = kid.var("w")  # creates a new, local one
    assert v is not root.find_var("w") and kid.find_local_var("w") is v
    assert root.has_kid(kid) and kid.parent() is root
    assert sorted(root.local_var_names()) == ["w"]


def test_drop_kids_and_erase_vars():
    root = Scope()
    kid = root.new_scope()
    root.var("a")
    root.var("b")
    root.erase_vars(["a"])
    assert root.local_var_names() == ["b"]
    root.drop_kids()
    assert not root.has_kid(kid)


def test_tensor_set_copies_and_reports_shape_dtype_bytes():
    t = DenseTensor()
    assert not t._is_initialized()
    src = np.arange(6, dtype="float32").reshape(2, 3)
    t.set(src, paddle.CPUPlace())
    src[0, 0] = 100
    assert np.array(t)[0, 0] == 0  # copied
    assert t.shape() == [2, 3] and t._dtype() == "float32" and t._numel() == 6 and t.nbytes() == 24
    t._clear()
    assert not t._is_initialized() and t._meta.shape == (2, 3)


def test_uninitialized_tensor_and_bad_values_raise_typed_errors():
    with pytest.raises(PreconditionNotMet):
        DenseTensor().shape()
    with pytest.raises(InvalidArgument):
        DenseTensor().set(np.array(["a", "b"]))
    with pytest.raises(InvalidArgument):
        Scope().var("")
    with pytest.raises(NotFound, match="'nope'"):
        Scope().get("nope")


def test_global_scope_and_scope_guard():
    s = Scope()
    outer = paddle.static.global_scope()
    with paddle.static.scope_guard(s):
        assert paddle.static.global_scope() is s
    assert paddle.static.global_scope() is outer
    with pytest.raises(InvalidArgument):
        with paddle.static.scope_guard(object()):
            pass


def test_errors_are_also_builtin_exceptions():
    from refimpl.core import errors
    assert issubclass(errors.InvalidArgument, ValueError)
    assert issubclass(errors.NotFound, KeyError)
    assert issubclass(errors.PreconditionNotMet, RuntimeError)
    assert issubclass(errors.Unimplemented, NotImplementedError)
    assert str(errors.NotFound("var 'x'")) == "(NotFound) var 'x'"
