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
    def __init__(self, memory, threshold_bytes=0, on_free=None):
        self.memory = memory
        self.threshold = threshold_bytes
        self.pending = []
        self.pending_bytes = 0
        self.on_free = on_free  # callback(tensor_name, nbytes) for the event trace

    def add(self, tensors):
        """``tensors``: list of (name, DenseTensor) that are dead now."""
        if self.threshold <= 0:
            self._free(tensors)
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
            self._free(items)

    def _free(self, tensors):
        mem = self.memory
        on_free = self.on_free
        for name, t in tensors:
            a = t._array
            if a is not None:
                mem.live -= a.nbytes
                t._clear()
                if on_free is not None:
                    on_free(name, a.nbytes)
