"""GPU garbage collectors: the CPU collector's plan and accounting, a different moment of release.

Mirrors Paddle's GPU collectors (``paddle/fluid/framework/garbage_collector.h``):

* ``StreamGarbageCollector`` (Paddle's ``StreamGarbageCollector`` /
  ``DefaultStreamGarbageCollector``): a dead tensor's device memory is
  queued behind the work already issued on the kernels' stream. Each batch
  of frees records an event on that stream; the batch's arrays are held
  until the event has completed (polled, without blocking, at every later
  free and at the end of a run) or until :meth:`synchronize` waits for the
  stream. Only then are the references dropped and the memory goes back to
  numba's allocator.
* ``UnsafeFastGarbageCollector`` (Paddle's ``UnsafeFastGPUGarbageCollector``,
  selected by ``FLAGS_fast_eager_deletion_mode``, default True): the memory
  goes back at once, relying on the allocator handing it out only to later
  work on the same stream.

Everything the executor sees is the CPU ``GarbageCollector``'s: the
eager-deletion plan (which tensors die after which op) is the shared one,
``FLAGS_eager_delete_tensor_gb`` batches frees in the same way (``add`` /
``flush`` are inherited), and ``free`` updates ``Memory`` and calls
``on_free`` at the same point with the same bytes, so the alloc/free event
trace and the live/peak numbers are byte for byte the CPU backend's. Only
the release of the device arrays differs; ``held_bytes`` (freed in the
accounting, not yet released), ``released_bytes`` and ``on_release`` make
that moment observable (the simulator's stream is synchronous, so tests
use a stand-in stream whose events complete only on ``synchronize``).

Differences from Paddle: there is one stream (numba's default), so one
event per batch suffices; "release" drops the last reference, and numba's
own deferred-deallocation queue then returns the memory to the driver.
"""
from collections import deque

from refimpl import flags
from refimpl.executor.garbage_collector import GarbageCollector


class _DeviceGarbageCollector(GarbageCollector):
    """The CPU collector's ``add`` / ``flush`` / accounting; subclasses decide when arrays are released."""

    FUSABLE = False  # the executor must call ``free`` (not inline frees into the ops' runners)

    def __init__(self, memory, threshold_bytes=0, keep_meta=()):
        super().__init__(memory, threshold_bytes, keep_meta)
        self.held_bytes = 0       # device bytes freed in the accounting but not yet released
        self.released_bytes = 0   # device bytes released so far
        self.on_release = None    # callback(nbytes) when a batch of device memory is released

    def _retire(self, arrays):
        self._retire_batch(arrays, sum(a.nbytes for a in arrays))

    def _retire_batch(self, arrays, nbytes):
        raise NotImplementedError

    def _release(self, arrays, nbytes):
        """Drop the collector's references: the memory goes back to the allocator."""
        arrays.clear()
        self.released_bytes += nbytes
        if self.on_release is not None:
            self.on_release(nbytes)

    def synchronize(self):
        """Release everything still held (nothing is, for collectors that release at once)."""


class UnsafeFastGarbageCollector(_DeviceGarbageCollector):
    """Releases device memory as soon as the plan says the tensor is dead (``FLAGS_fast_eager_deletion_mode``)."""

    def _retire_batch(self, arrays, nbytes):
        self._release(arrays, nbytes)


def _default_stream():
    from .device import cuda
    return cuda.default_stream()


def _new_event():
    from .device import cuda, simulated
    return cuda.event() if simulated() else cuda.event(timing=False)  # (the simulator's takes no args)


def _done(event):
    """Whether the stream has passed ``event`` (the simulator's events have no ``query``: it is synchronous)."""
    query = getattr(event, "query", None)
    return True if query is None else bool(query())


class StreamGarbageCollector(_DeviceGarbageCollector):
    """Releases device memory only once the kernels' stream has passed the point where it died.

    ``stream`` / ``new_event`` default to numba's default stream and
    ``cuda.event``; tests pass stand-ins.
    """

    def __init__(self, memory, threshold_bytes=0, keep_meta=(), stream=None, new_event=None):
        super().__init__(memory, threshold_bytes, keep_meta)
        self.stream = stream if stream is not None else _default_stream()
        self.new_event = new_event or _new_event
        self.held = deque()  # (event, arrays, nbytes), oldest first (stream order)

    def _retire_batch(self, arrays, nbytes):
        self._reap()
        event = self.new_event()
        event.record(self.stream)  # the batch is free once the work issued so far is done
        self.held.append((event, arrays, nbytes))
        self.held_bytes += nbytes

    def _reap(self):
        """Release, in order, the batches whose event the stream has passed (does not block)."""
        held = self.held
        while held and _done(held[0][0]):
            _, arrays, nbytes = held.popleft()
            self.held_bytes -= nbytes
            self._release(arrays, nbytes)

    def flush(self):
        super().flush()
        self._reap()

    def synchronize(self):
        """Wait for the stream, then release every held batch."""
        self.stream.synchronize()
        held, self.held = self.held, deque()
        for _, arrays, nbytes in held:
            self.held_bytes -= nbytes
            self._release(arrays, nbytes)


def collector_class():
    """The GPU collector ``FLAGS_fast_eager_deletion_mode`` selects (as Paddle's ``CreateGarbageCollector``)."""
    if flags.flag("FLAGS_fast_eager_deletion_mode"):
        return UnsafeFastGarbageCollector
    return StreamGarbageCollector
