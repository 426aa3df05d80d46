"""The blocking queue between a data loader's producer thread and the ``read`` op.

Mirrors Paddle's ``OrderedMultiDeviceDenseTensorBlockingQueue`` (held by a
scope variable through ``...QueueHolder``), the ``PyReader`` that pops from
it and the ``BufferedReader`` behind ``create_double_buffer_reader``:

* **bounded**: ``push`` blocks while ``capacity`` batches wait (at least one
  per device, so a full round always fits); ``close`` ends the epoch (pushes
  return False, readers drain what is left, then get EOF); ``kill(exc)``
  makes every later read raise Paddle's "Blocking queue is killed" error
  (batches pushed before it are still read: deterministic, where Paddle
  races). A ``KeyboardInterrupt`` or ``SystemExit`` from the generator is
  raised again, as the same kind, in the reading thread.
* **generations**: every ``reset`` starts a new generation; a producer
  pushes, closes and kills under the generation ``start`` gave it, so a
  producer of an earlier epoch (say one still inside its generator when
  ``loader.reset()`` gave up waiting for it) can never touch the next epoch.
* **devices**: with ``set_device_count(N)`` (CompiledProgram with N places)
  batch ``k`` goes to device ``k % N``: each place reads its own batches in
  order. A device reads round ``r`` only once the round is complete (or the
  queue is closed), so a partial last round is treated the same on every
  place: dropped with ``drop_last`` (every place gets EOF), else its rows
  are split over all the places, ``ceil(rows / N)`` each as a fed batch is
  split (Paddle's ``SplitLoDTensor``), so every place trains on real rows; a
  place left without rows (fewer rows than places) gets a 0-row batch with
  the data's own trailing dims.
* **double buffer**: a device's :class:`DoubleBufferReader` pops its next
  batch on a short-lived thread while the current one is used.

Differences: Paddle keeps one sub-queue per device; here one dict indexed by
batch number does the same. Paddle's iterable reader leaves a place without
data out of the partial last round (``reader_py.cc``; ``drop_last=False`` is
documented for inference) and its data-parallel executor refuses such a
partial feed when training; splitting the round's rows instead lets a
training step use every row, as ``exe.run(compiled, feed=rows)`` would.
Reading from a queue whose loader was never started raises instead of
blocking forever. Queues are also found by name in a process-wide registry
(``refimpl.core.queue_registry``, below the ops that read them), so programs
run in any scope (a pipeline rank's fresh scope) reach them; Paddle looks only in the scope. ``EOFException`` is
``refimpl.core.errors.EOFException`` (Paddle's ``paddle.base.core``), and the
batch checks of the ``read`` op live with it in ``refimpl.ops.reader_ops``.
"""
import threading
from typing import Any, List, Optional

import numpy as np

from refimpl.core.errors import EOFException, Fatal, InvalidArgument, PreconditionNotMet  # noqa: F401
from refimpl.core.queue_registry import lookup

JOIN_TIMEOUT = 10.0  # seconds to wait for a prefetch or producer thread to stop


class BlockingQueue:
    """Bounded, ordered, multi-device batch queue (see the module docstring)."""

    nbytes = 0  # it sits in a scope variable where tensors keep their buffer

    def __init__(self, capacity, name=None):
        if not capacity or int(capacity) < 1:
            raise InvalidArgument(f"Please give value to capacity (got {capacity!r})")
        self.capacity, self.name = int(capacity), name
        self._cond = threading.Condition()
        self._device_count = 1
        self._readers = {}
        self._generation = 0  # see the module docstring: bumped by every reset
        self._reset_state()

    def _reset_state(self):
        self._items = {}                              # batch number -> batch
        self._pushed = 0
        self._next = list(range(self._device_count))  # next batch number of each device
        self._closed, self._killed, self._started = False, None, False

    # ---- set-up ----------------------------------------------------------
    def set_device_count(self, n):
        """``compiled_program.cc``'s ``SetDeviceCount`` (CompiledProgram: the number of places)."""
        with self._cond:
            if n == self._device_count:
                return
            if self._next != list(range(self._device_count)):
                raise PreconditionNotMet(f"queue {self.name!r}: cannot set the device count to {n} "
                                         f"after reading started; call loader.reset() first")
            self._device_count = int(n)
            self._next = list(range(self._device_count))
            self._readers.clear()
            self._cond.notify_all()

    def device_count(self):
        return self._device_count

    def start(self) -> int:
        """Open the epoch for reading; returns its generation, the one its producer pushes under."""
        with self._cond:
            self._started = True
            self._cond.notify_all()
            return self._generation

    # ---- producer side -----------------------------------------------------
    def _stale(self, generation):
        return generation is not None and generation != self._generation

    def push(self, batch: List[Any], generation: Optional[int] = None) -> bool:
        """Add one batch; block while full. False once closed, killed or of a past generation (stop)."""
        with self._cond:
            while not self._closed and self._killed is None and not self._stale(generation) and \
                    len(self._items) >= max(self.capacity, self._device_count):
                self._cond.wait()
            if self._closed or self._killed is not None or self._stale(generation):
                return False
            self._items[self._pushed] = batch
            self._pushed += 1
            self._cond.notify_all()
            return True

    def close(self, generation: Optional[int] = None) -> None:
        """End the epoch (of ``generation``; None: the current one)."""
        with self._cond:
            if not self._stale(generation):
                self._closed = True
            self._cond.notify_all()

    def abandon(self) -> None:
        """Its loader is gone: end a started epoch, so that a producer waiting on the full queue stops."""
        with self._cond:
            if self._started:
                self._closed = True
            self._cond.notify_all()

    def kill(self, error: Optional[BaseException] = None, generation: Optional[int] = None) -> None:
        """Make every later read raise ``error`` (of ``generation``; None: the current epoch)."""
        with self._cond:
            if not self._stale(generation):
                self._killed = error if error is not None else RuntimeError("killed")
            self._cond.notify_all()

    def is_closed(self):
        return self._closed

    def size(self):
        return len(self._items)

    # ---- consumer side -----------------------------------------------------
    def pop(self, device=0, drop_last=True):
        """The next batch of ``device``; None at the end of the epoch (see the module docstring)."""
        with self._cond:
            n = self._device_count
            if not 0 <= device < n:
                raise InvalidArgument(f"queue {self.name!r}: device {device} of {n}")
            i = self._next[device]
            round_end = (i // n + 1) * n
            while True:
                if i < self._pushed and self._pushed >= round_end:
                    break  # batches made before a generator error are still read
                self._check_alive()
                if self._closed:
                    if drop_last or self._pushed <= round_end - n:
                        return None
                    self._split_last_round(round_end - n)  # completes the round
                    continue
                self._cond.wait()
            batch = self._items.pop(i)
            self._next[device] += n
            self._cond.notify_all()
            return batch

    def _split_last_round(self, first):
        """Spread the rows of the partial round starting at batch ``first`` over every device."""
        n = self._device_count
        batches = [self._items.pop(j) for j in range(first, self._pushed)]
        try:
            fields = [np.concatenate(arrays) for arrays in zip(*batches)]
        except ValueError:  # the batches differ in a trailing dim: keep each whole on its place
            shares = batches + [[a[:0] if a.ndim else a for a in batches[-1]] for _ in range(n - len(batches))]
        else:
            rows = fields[0].shape[0] if fields and fields[0].ndim else 0
            step = max(-(-rows // n), 1)  # ceil(rows / n), as CompiledProgram splits a fed batch
            shares = [[a[d * step:(d + 1) * step] for a in fields] for d in range(n)]
        for d, share in enumerate(shares):
            self._items[first + d] = share
        self._pushed = first + n

    def _check_alive(self):
        if self._killed is not None:
            e = self._killed
            if not isinstance(e, Exception):  # KeyboardInterrupt, SystemExit: the reader gets the same kind
                raise _same_kind(e, self.name)
            raise Fatal(f"Blocking queue is killed because the data reader raises an exception: "
                        f"{type(e).__name__}: {e} (queue {self.name!r}; loader.reset() starts over)")
        if not self._started and not self._closed:
            raise PreconditionNotMet(f"the DataLoader of queue {self.name!r} is not started: call "
                                     f"loader.start() before exe.run (after loader.reset() for a new epoch)")

    def reader(self, device=0, double_buffer=False):
        """The reader of ``device`` (one per device, shared by every op and job that reads it)."""
        with self._cond:
            key = (device, bool(double_buffer))
            r = self._readers.get(key)
            if r is None:
                r = self._readers[key] = (DoubleBufferReader if double_buffer else PyReader)(self, device)
            return r

    def reset(self) -> None:
        """Empty the queue for a new epoch, of a new generation (an old producer can no longer push)."""
        for r in list(self._readers.values()):
            r.reset()
        with self._cond:
            self._generation += 1
            self._reset_state()
            self._cond.notify_all()


def _same_kind(error: BaseException, queue_name: Optional[str]) -> BaseException:
    """A fresh ``type(error)`` (caused by it) for a reading thread, naming the queue where it can."""
    try:
        again = type(error)(*error.args)
    except Exception:  # noqa: B902 - a constructor that wants other arguments: raise the original
        return error
    again.__cause__ = error
    if hasattr(again, "add_note"):
        again.add_note(f"raised by the generator of the DataLoader feeding queue {queue_name!r}")
    return again


class PyReader:
    """Reads one device's batches from the queue (Paddle's ``PyReader``)."""

    def __init__(self, queue, device):
        self.queue, self.device = queue, device

    def read_next(self, drop_last=True):
        return self.queue.pop(self.device, drop_last)

    def reset(self):
        pass


class DoubleBufferReader(PyReader):
    """Pops the next batch on a helper thread while the caller uses this one (``BufferedReader``)."""

    def __init__(self, queue, device):
        super().__init__(queue, device)
        self._pending = None  # (thread, box, drop_last)

    def read_next(self, drop_last=True):
        pending, self._pending = self._pending, None
        if pending is not None and pending[2] == drop_last:
            batch = self._take(pending)
        else:
            if pending is not None:
                self._take(pending)  # prefetched under another drop_last: cannot happen in one program
            batch = self.queue.pop(self.device, drop_last)
        if batch:
            self._pending = self._prefetch(drop_last)
        return batch

    def _prefetch(self, drop_last):
        box = {}

        def body():
            try:
                box["batch"] = self.queue.pop(self.device, drop_last)
            except BaseException as exc:  # noqa: B902 - handed to the reading thread
                box["error"] = exc

        t = threading.Thread(target=body, name=f"refimpl-double-buffer-{self.queue.name}-{self.device}",
                             daemon=True)
        t.start()
        return t, box, drop_last

    @staticmethod
    def _take(pending):
        t, box, _ = pending
        t.join()
        if "error" in box:
            raise box["error"]
        return box["batch"]

    def reset(self):
        pending, self._pending = self._pending, None
        if pending is not None:
            pending[0].join(JOIN_TIMEOUT)


def set_reader_device_count(program, device_count):
    """``compiled_program.cc``'s ``InitReaderQueueDeviceCount``: every ``create_py_reader`` queue gets ``device_count``."""
    for op in program.global_block().ops:
        if op.type == "create_py_reader":
            queue = lookup(op.input("blocking_queue")[0])
            if queue is not None:
                queue.set_device_count(device_count)
