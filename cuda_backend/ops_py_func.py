"""CUDA kernel for ``refimpl/ops/py_func_ops.py``: py_func.

As Paddle's py_func, which runs only on the CPU (its GPU inputs are copied to the host first):
the inputs are copied to the host, the registered Python callable runs there (the NumPy kernel's
checks included), and its results are copied back to the device.
"""
from refimpl.ops import py_func_ops as cpu
from refimpl.ops.registry import register_kernel

from .device import to_device, to_host


def py_func(X, *, forward_callable_id):
    results = cpu.call_registered(forward_callable_id, [to_host(x) for x in X])
    return [None if r is None else to_device(r) for r in results]


register_kernel("py_func", "cuda", py_func)
