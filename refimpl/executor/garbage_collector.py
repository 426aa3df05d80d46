"""Memory accounting and the garbage collector that frees dead tensors.

Mirrors Paddle's ``GarbageCollector`` family under eager deletion. The
collector gets, after each op, the tensors the plan says are dead:

* ``FLAGS_eager_delete_tensor_gb < 0``: no collector at all (nothing freed);
* ``== 0``: they are freed at once;
* ``> 0``: they are queued, and the whole queue is freed as soon as the
  queued bytes reach the threshold (and at the end of a run).

``Memory`` counts the bytes held by the variables a run touches, per
variable (two variables that share a buffer count twice, as a per-variable
estimate does); ``peak`` is the high-water mark of a run.
"""


class Memory:
    __slots__ = ("live", "peak")

    def __init__(self):
        self.live = 0
        self.peak = 0

    def reset(self, live):
        self.live = self.peak = live


class GarbageCollector:
    """Frees dead tensors now (threshold 0) or in batches of ``threshold`` bytes.

    ``keep_meta`` names the tensors some later op reads as no-need-buffer:
    only those keep their shape and dtype when freed.
    """

    def __init__(self, memory, threshold_bytes=0, keep_meta=()):
        self.memory = memory
        self.threshold = threshold_bytes
        self.keep_meta = set(keep_meta)
        self.pending = []
        self.pending_bytes = 0
        self.on_free = None  # callback(name, nbytes), set while tracing

    def add(self, tensors):
        """``tensors``: list of (name, DenseTensor) that are dead now."""
        if self.threshold <= 0:
            self.free(tensors)
            return
        for item in tensors:
            a = item[1]._array
            if a is not None:
                self.pending.append(item)
                self.pending_bytes += a.nbytes
        if self.pending_bytes >= self.threshold:
            self.flush()

    def flush(self):
        if self.pending:
            items, self.pending, self.pending_bytes = self.pending, [], 0
            self.free(items)

    def free(self, tensors):
        """Detach dead tensors (accounting, trace callback) and hand their arrays to ``_retire``."""
        mem, keep, on_free = self.memory, self.keep_meta, self.on_free
        live = mem.live
        retired = []
        for name, t in tensors:
            a = t._array
            if a is None:
                continue
            live -= a.nbytes
            if name in keep:
                t._clear()
            else:
                t._array = None
            if on_free is not None:
                on_free(name, a.nbytes)
            retired.append(a)
        mem.live = live
        if retired:
            self._retire(retired)

    def _retire(self, arrays):
        """Give the memory back. On the CPU dropping the last reference does it; device
        collectors (``cuda_backend.garbage_collector``) decide when."""
