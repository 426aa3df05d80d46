"""``DataLoader.from_generator``: feed a static program from a Python generator.

Mirrors ``paddle.base.reader.DataLoader.from_generator`` and the
``GeneratorLoader`` it returns (``paddle/base/reader.py``):

* the data source is set with ``set_sample_generator`` (samples, batched
  here), ``set_sample_list_generator`` (lists of samples) or
  ``set_batch_generator`` (whole batches, one array per feed variable);
* a producer thread runs the generator and pushes each batch into a bounded
  :class:`~refimpl.io.blocking_queue.BlockingQueue`; an exception in the
  generator kills the queue, so the consumer raises it instead of hanging
  (a ``KeyboardInterrupt`` / ``SystemExit`` arrives as the same kind);
* each epoch's producer is a small :class:`_Producer` that pushes under its
  epoch's queue generation and holds no reference to the loader: a loader
  dropped mid-epoch is collected, its finalizer closes the queue, and the
  producer blocked on the full queue wakes up and ends. ``reset()`` waits at
  most ``PRODUCER_JOIN_S`` for a producer busy inside the generator; one
  still there is left to end on its own, and can no longer push;
* **iterable** (``for data in loader(): exe.run(main, feed=data)``): each
  step yields a feed dict (a list of arrays with ``return_list``), or with
  several ``places`` a list holding one per place;
* **non-iterable**: the constructor appends ``create_py_reader`` (+
  ``create_double_buffer_reader``) and ``read`` ops to the current main
  program, the queue lives in the global scope under
  ``lod_tensor_blocking_queue_N``; ``loader.start()`` starts an epoch,
  ``exe.run`` raises :class:`EOFException` at its end and ``loader.reset()``
  makes ready for the next one.

Differences: places are only counted (CPU); sample batching stacks samples
and reshapes them to the variable's shape as ``DataFeeder`` does; LoD is not
supported (``lod_levels`` are all 0). Paddle's ``_reset`` joins the producer
without a limit; here a generator that never yields again cannot block
``reset()``. An error raised to the iterable consumer stops that epoch's
producer (Paddle's keeps running until the loader is reset).
"""
import functools
import logging
import threading
import weakref
from typing import Any, Callable, Iterable, List, Sequence

import numpy as np

from refimpl.core.dtypes import to_numpy_dtype, to_vartype
from refimpl.core.errors import InvalidArgument, PreconditionNotMet
from refimpl.core.queue_registry import register
from refimpl.core.scope import global_scope
from refimpl.framework.program import default_main_program
from refimpl.ops.reader_ops import check_batch

from .blocking_queue import BlockingQueue

logger = logging.getLogger("refimpl")

PRODUCER_JOIN_S = 1.0  # how long reset() waits for a producer that is inside the generator

_COUNTS = {}
_COUNTS_LOCK = threading.Lock()


def _unique_name(key):
    """Paddle's ``data_loader_unique_name_generator``: its own counter, untouched by ``unique_name.guard``."""
    with _COUNTS_LOCK:
        n = _COUNTS[key] = _COUNTS.get(key, -1) + 1
    return f"{key}_{n}"


class DataLoader:
    """Only the static-graph factory of ``paddle.io.DataLoader`` (``from_generator``)."""

    @staticmethod
    def from_generator(feed_list=None, capacity=None, use_double_buffer=True, iterable=True,
                       return_list=False, use_multiprocess=False, drop_last=True):
        return GeneratorLoader(feed_list, capacity, use_double_buffer, iterable, return_list, drop_last)


class GeneratorLoader:
    def __init__(self, feed_list=None, capacity=None, use_double_buffer=True, iterable=True,
                 return_list=False, drop_last=True):
        if not capacity:
            raise InvalidArgument("Please give value to capacity.")
        if not feed_list:
            raise InvalidArgument("Feed list must be given under static graph mode.")
        self._feed_list = list(feed_list)
        self._names = [v.name for v in self._feed_list]
        self._shapes = [list(v.shape) for v in self._feed_list]
        self._dtypes = [str(to_numpy_dtype(v.dtype)) for v in self._feed_list]
        self._capacity, self._use_double_buffer = int(capacity), use_double_buffer
        self._iterable, self._return_list, self._drop_last = iterable, return_list, drop_last
        self._batch_reader, self._places = None, None
        self._producer = None  # this epoch's _Producer
        self._queue = None
        if not iterable:
            self._init_non_iterable()

    def _set_queue(self, queue):
        """Own ``queue``; when this loader is collected its epoch is closed, which ends its producer."""
        self._queue = queue
        weakref.finalize(self, queue.abandon)

    # ---- data sources --------------------------------------------------------
    def set_batch_generator(self, reader, places=None):
        """``reader()`` yields one batch at a time: a list/tuple with one array per feed variable."""
        self._batch_reader = reader
        self._places = _place_list(places)
        return self

    def set_sample_list_generator(self, reader, places=None):
        """``reader()`` yields lists of samples; each sample has one field per feed variable."""
        fields = (self._names, self._shapes, self._dtypes)  # not self: the producer must not keep the loader

        def batches():
            for samples in reader():
                yield _stack(samples, *fields)
        return self.set_batch_generator(batches, places)

    def set_sample_generator(self, reader, batch_size, drop_last=True, places=None):
        """``reader()`` yields samples; they are grouped into batches of ``batch_size``."""
        if batch_size <= 0:
            raise InvalidArgument("batch_size must be larger than 0")

        def sample_lists():
            buf = []
            for sample in reader():
                buf.append(sample)
                if len(buf) == batch_size:
                    yield buf
                    buf = []
            if buf and not drop_last:
                yield buf
        return self.set_sample_list_generator(sample_lists, places)

    # ---- non-iterable mode -----------------------------------------------------
    def _init_non_iterable(self):
        queue_name = _unique_name("lod_tensor_blocking_queue")
        self._set_queue(BlockingQueue(self._capacity, queue_name))
        register(queue_name, self._queue)
        global_scope().var(queue_name).get_tensor()._array = self._queue  # Paddle: the scope holds it
        block = default_main_program().current_block()
        reader = block.create_var(name=_unique_name("create_py_reader"), type="READER",
                                  persistable=True, stop_gradient=True)
        block.append_op(type="create_py_reader", inputs={"blocking_queue": [queue_name]},
                        outputs={"Out": [reader]},
                        attrs={"shape_concat": [d for s in self._shapes for d in s],
                               "lod_levels": [0] * len(self._names),
                               "dtypes": [to_vartype(d) for d in self._dtypes],
                               "need_check_feed": [int(getattr(v, "need_check_feed", True) or v.is_data)
                                                   for v in self._feed_list],
                               "ranks": [len(s) for s in self._shapes]})
        if self._use_double_buffer:
            buffered = block.create_var(name=_unique_name("double_buffer"), type="READER",
                                        persistable=True, stop_gradient=True)
            block.append_op(type="create_double_buffer_reader", inputs={"UnderlyingReader": [reader]},
                            outputs={"Out": [buffered]}, attrs={"place": "AUTO"})
            reader = buffered
        self._reader_var = reader
        block.append_op(type="read", inputs={"Reader": [reader]}, outputs={"Out": self._feed_list},
                        attrs={"drop_last": self._drop_last})

    @property
    def queue(self):
        return self._queue

    @property
    def iterable(self):
        return self._iterable

    def start(self):
        if self._iterable:
            raise PreconditionNotMet("start() cannot be called when DataLoader is iterable")
        self._start()

    def reset(self):
        if self._iterable:
            raise PreconditionNotMet("reset() cannot be called when DataLoader is iterable")
        self._reset()

    # ---- the producer thread ---------------------------------------------------
    def _start(self):
        if self._batch_reader is None:
            raise PreconditionNotMet("Data source of DataLoader has not set yet: call set_sample_generator, "
                                     "set_sample_list_generator or set_batch_generator first")
        if self._producer is not None:
            raise PreconditionNotMet("the DataLoader is already started: call reset() before start()")
        convert = functools.partial(_convert, self._names, self._dtypes)
        self._producer = _Producer(self._batch_reader, convert, self._queue, self._queue.start())

    def _reset(self):
        """Stop the producer (it may be blocked on a full queue), then empty the queue for a new generation."""
        producer, self._producer = self._producer, None
        self._queue.close()  # wakes a producer blocked on the full queue: its push returns False
        if producer is not None:
            producer.thread.join(PRODUCER_JOIN_S)
            if producer.thread.is_alive():
                logger.warning(f"DataLoader queue {self._queue.name!r}: the generator did not return within "
                               f"{PRODUCER_JOIN_S} s of reset(); its thread ends at its next batch, unpushed")
        self._queue.reset()

    close = _reset  # stop the producer thread mid-epoch

    # ---- iterable mode -----------------------------------------------------------
    def __call__(self):
        return self

    def __iter__(self):
        if not self._iterable:
            raise PreconditionNotMet("DataLoader is not iterable")
        if self._batch_reader is None:
            raise PreconditionNotMet("Data source of DataLoader has not set yet")
        if self._queue is None:
            self._set_queue(BlockingQueue(self._capacity, _unique_name("lod_tensor_blocking_queue")))
        else:
            self._reset()
        self._queue.set_device_count(len(self._places))
        self._start()
        return self

    def __next__(self):
        try:
            per_place = [self._next_of(d) for d in range(len(self._places))]
        except StopIteration:
            self._reset()
            raise
        except BaseException:  # the epoch is broken: stop its producer (it would wait on a full queue)
            self._queue.close()
            raise
        return per_place[0] if len(per_place) == 1 else per_place

    def _next_of(self, device):
        batch = self._queue.reader(device, self._use_double_buffer).read_next(self._drop_last)
        if batch is None:
            raise StopIteration
        check_batch(batch, self._names, self._shapes, self._dtypes, [True] * len(self._names))
        return batch if self._return_list else dict(zip(self._names, batch))


class _Producer:
    """One epoch's producer thread: runs the generator, pushes under the epoch's queue generation.

    It holds the queue, the generator function and the converter, never the loader (a dropped
    loader must be collectable while this thread waits on the full queue).
    """

    def __init__(self, reader: Callable[[], Iterable[Any]], convert: Callable[[Any], List[np.ndarray]],
                 queue: BlockingQueue, generation: int) -> None:
        self.reader, self.convert, self.queue, self.generation = reader, convert, queue, generation
        self.thread = threading.Thread(target=self._run, name=f"refimpl-dataloader-{queue.name}-{generation}",
                                       daemon=True)
        self.thread.start()

    def _run(self):
        queue, generation = self.queue, self.generation
        try:
            for batch in self.reader():
                if not queue.push(self.convert(batch), generation):
                    return  # closed, or reset into a newer generation
            queue.close(generation)
        except BaseException as exc:  # noqa: B902 - KeyboardInterrupt / SystemExit too: the consumer must wake
            logger.warning(f"Your reader has raised an exception! ({type(exc).__name__} in the generator of "
                           f"DataLoader queue {queue.name!r})")
            queue.kill(exc, generation)


def _stack(samples: Sequence[Any], names: List[str], shapes: List[List[int]], dtypes: List[str]) -> List[np.ndarray]:
    """A list of samples -> one array per feed var (``DataFeeder``: stack, then the var's shape)."""
    out = []
    for j, (name, shape, dtype) in enumerate(zip(names, shapes, dtypes)):
        arr = np.asarray([np.asarray(s[j], dtype=dtype) for s in samples], dtype=dtype)
        if all(d >= 0 for d in shape[1:]) and arr.ndim != len(shape):
            try:
                arr = arr.reshape([len(samples)] + list(shape[1:]))
            except ValueError:
                raise InvalidArgument(f"The fed Variable {name} should have shape {shape}, but a sample "
                                      f"of shape {list(arr.shape[1:])} cannot be reshaped to it") from None
        out.append(arr)
    return out


def _convert(names: List[str], dtypes: List[str], batch: Any) -> List[np.ndarray]:
    """One generated batch -> one array per feed var (a dict is taken by the feed var names)."""
    if isinstance(batch, dict):
        batch = [batch[n] for n in names]
    if not isinstance(batch, (list, tuple)):
        raise InvalidArgument(f"a batch generator must yield a list with one array per feed variable "
                              f"{names}, got {type(batch).__name__}")
    return [np.asarray(a) if isinstance(a, np.ndarray) else np.asarray(a, dtype=dt)
            for a, dt in zip(batch, dtypes)] + [np.asarray(a) for a in batch[len(dtypes):]]


def _place_list(places):
    if places is None:
        return [None]
    if isinstance(places, (list, tuple)):
        if not places:
            raise InvalidArgument("places must not be empty")
        return list(places)
    return [places]
