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


@pytest.fixture
def gpu_amp_lists(monkeypatch):
    """The AMP lists of Paddle's GPU build (every op has a float16 kernel), as the oracle recorders give
    Paddle's CPU wheel (``tests/oracle_sharding/sharding_cases.py``)."""
    from refimpl.static.amp import fp16_lists
    sys_lists = fp16_lists._get_sys_unsupported_list
    monkeypatch.setattr(fp16_lists, "_get_sys_unsupported_list", lambda dtype: ("GPU", set(), sys_lists(dtype)[2]))
