import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


import pytest  # noqa: E402


@pytest.fixture
def float64_default():
    """``paddle.set_default_dtype('float64')`` for the test (layers' and ``split``'s parameters are created in
    the default dtype, as Paddle's), the old default after."""
    import refimpl
    before = refimpl.get_default_dtype()
    refimpl.set_default_dtype("float64")
    yield
    refimpl.set_default_dtype(before)
