"""Under the simulator, threads (CUDA threads, and in-process ranks) see what they would on a GPU.

* Shared memory is one array per block however threads interleave.
  numba-cuda's simulator looks a shared array up and stores it without a
  lock; ``cuda_backend.device`` serializes the two. A dict whose lookups
  yield the interpreter (a short sleep) forces the interleaving that,
  unpatched, gives each thread an array of its own: one test shows the
  simulator's method failing under it, the next the backend's passing.
* A rank that makes a kernel while another rank's launch runs gets a real
  kernel: the launch has swapped the module's ``cuda`` for the simulator's
  fake one, which has no ``jit``.
"""
import threading
import time

import numpy as np
import pytest

import cuda_backend  # (importing it installs the locked shared arrays under the simulator)
from cuda_backend import ew
from cuda_backend.device import LAUNCH_HOOKS, cuda, simulated
from cuda_backend.ops_math import f_neg

pytestmark = pytest.mark.skipif(not simulated(), reason="checks the simulator itself (runs under NUMBA_ENABLE_CUDASIM=1)")

THREADS = 8


class _YieldingDict(dict):
    def get(self, key, default=None):
        found = super().get(key, default)
        time.sleep(0.002)  # other threads run between this lookup and the store that follows it
        return found


@pytest.fixture
def yielding_lookups(monkeypatch):
    from numba.cuda.simulator import kernelapi
    init = kernelapi.FakeCUDAShared.__init__

    def patched(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self._allocations = _YieldingDict()
    monkeypatch.setattr(kernelapi.FakeCUDAShared, "__init__", patched)
    return kernelapi.FakeCUDAShared


@cuda.jit
def _exchange(out):
    sh = cuda.shared.array(THREADS, np.float64)
    t = cuda.threadIdx.x
    sh[t] = t + 1
    cuda.syncthreads()
    s = 0.0
    for i in range(THREADS):
        s += sh[i]
    out[t] = s


def _run():
    out = np.zeros(THREADS)
    _exchange[1, THREADS](out)
    return out


def test_unlocked_simulator_lookup_splits_a_blocks_shared_array(yielding_lookups, monkeypatch):
    original = yielding_lookups.array.__wrapped__
    monkeypatch.setattr(yielding_lookups, "array", original)
    assert not (_run() == THREADS * (THREADS + 1) / 2).all()


def test_locked_lookup_gives_every_thread_the_same_shared_array(yielding_lookups):
    assert getattr(yielding_lookups.array, "_refimpl", False)
    np.testing.assert_array_equal(_run(), np.full(THREADS, THREADS * (THREADS + 1) / 2))


def test_a_kernel_made_during_another_threads_launch_is_a_real_kernel():
    @ew.functor(1)
    def f_twice(DT):
        return lambda x, a, b: x + x
    x = cuda_backend.to_device(np.arange(20000, dtype=np.float32))
    launching = threading.Event()

    def hook(kernel, args):
        launching.set()
    LAUNCH_HOOKS.append(hook)
    try:
        runner = threading.Thread(target=ew.run1, args=(f_neg, x))  # ew's kernels run for a while
        runner.start()
        assert launching.wait(10)
        time.sleep(0.05)  # the launch is under way: ew.cuda is the simulator's fake module
        same, bcast = f_twice.kernels(np.float32)
        runner.join()
    finally:
        LAUNCH_HOOKS.remove(hook)
    x, out = np.float32([1.5, -2.0]), np.zeros(2, np.float32)
    same[1, 2](x, out, np.float32(0), np.float32(0))  # (not through launch: compile_check records those)
    np.testing.assert_array_equal(out, [3.0, -4.0])
