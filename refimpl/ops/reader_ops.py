"""Reader ops: ``create_py_reader``, ``create_double_buffer_reader``, ``read``.

Mirrors the op trio a non-iterable ``DataLoader.from_generator`` puts at the
start of the main program (``paddle/fluid/operators/reader/``):
``create_py_reader`` turns the blocking queue held by the scope variable
named in its ``blocking_queue`` input into a READER variable (attrs
``shape_concat``, ``ranks``, ``dtypes``, ``lod_levels``,
``need_check_feed``); ``create_double_buffer_reader`` wraps it so the next
batch is fetched while this one is used; ``read`` pops one batch into its
``Out`` variables (the feed list), checks it against the shapes and dtypes
(naming the variable, as ``read_op.cc``) and raises Paddle's
``EOFException`` at the end of an epoch.

Like ``feed``/``fetch`` they register ``prepare(ctx, op)`` hooks. Which
device's batches a ``read`` op takes is ``ctx.run_ctx["reader_device"]``
(CompiledProgram sets it per place; 0 otherwise), where Paddle gives each
place's graph copy its own reader. The READER variable holds a small
:class:`ReaderHolder` (Paddle's ``ReaderHolder``) in place of a tensor.
A queue missing from the scope is looked up by name in
``refimpl.core.queue_registry`` (``refimpl.io`` registers its queues there);
the batch check (:func:`check_batch`) is shared with the data loader.
"""
import numpy as np

from refimpl.core import queue_registry
from refimpl.core.device import to_device
from refimpl.core.dtypes import to_numpy_dtype
from refimpl.core.errors import EOFException, InvalidArgument, NotFound, PreconditionNotMet

from .registry import register_op

EOF_MESSAGE = "There is no next data."  # read_op.cc's EOF message


class ReaderHolder:
    """What a READER variable holds: the queue, the feed shapes and dtypes, double buffering."""

    nbytes = 0  # sits where a tensor keeps its buffer; holds no tensor memory

    def __init__(self, queue, shapes, dtypes, need_check, double_buffer=False):
        self.queue, self.shapes, self.dtypes = queue, shapes, dtypes
        self.need_check, self.double_buffer = need_check, double_buffer

    def buffered(self):
        return ReaderHolder(self.queue, self.shapes, self.dtypes, self.need_check, True)

    def read(self, device, drop_last):
        return self.queue.reader(device, self.double_buffer).read_next(drop_last)


def check_batch(batch, names, shapes, dtypes, need_check):
    """Paddle's ``read`` op check: one array per feed var, of its rank, fixed dims and dtype."""
    if len(batch) != len(names):
        raise InvalidArgument(f"the data loader gave {len(batch)} arrays, but its feed list has "
                              f"{len(names)} variables {list(names)}")
    for name, arr, shape, dtype, check in zip(names, batch, shapes, dtypes, need_check):
        if not check:
            continue
        if arr.ndim != len(shape) or any(d >= 0 and d != a for d, a in zip(shape, arr.shape)):
            raise InvalidArgument(f"The fed Variable {name} should have dimensions = {len(shape)}, shape = "
                                  f"{list(shape)}, but received fed shape {list(arr.shape)}")
        if dtype is not None and arr.dtype != np.dtype(dtype):
            raise InvalidArgument(f"The data type of fed Variable {name} must be {np.dtype(dtype)}, but "
                                  f"received {arr.dtype}")


def empty_batch(shapes, dtypes):
    """0-row arrays of the declared shapes: what ``read`` gives at the end of an epoch with ``throw_eof_exp`` off.

    (A partial last round never needs it: the queue splits that round's rows over the places, and a
    place left without rows gets 0-row arrays with the data's own trailing dims.)
    """
    return [np.zeros([0] + [max(d, 0) for d in s[1:]], dtype=dt or "float32") for s, dt in zip(shapes, dtypes)]



def _split_shapes(op):
    concat, ranks = list(op.attr("shape_concat")), list(op.attr("ranks"))
    shapes, at = [], 0
    for r in ranks:
        shapes.append([int(d) for d in concat[at:at + r]])
        at += r
    return shapes


def _prepare_create_py_reader(ctx, op):
    name = op.input("blocking_queue")[0]
    qt = ctx.tensor(name)
    if qt._array is None:  # the queue lives in the loader's scope; any scope can run the program
        qt._array = queue_registry.lookup(name)
    queue = qt._array
    if queue is None:
        raise NotFound(f"create_py_reader: no blocking queue {name!r} (was the DataLoader garbage collected?)")
    dtypes = [str(to_numpy_dtype(d)) for d in op.attr("dtypes")]
    need = [bool(c) for c in op.attr("need_check_feed")] or [True] * len(dtypes)
    holder = ReaderHolder(queue, _split_shapes(op), dtypes, need)
    out = ctx.tensor(op.output("Out")[0])

    def run():
        out._array = holder
    return run


def _prepare_double_buffer(ctx, op):
    src = ctx.tensor(op.input("UnderlyingReader")[0])
    out = ctx.tensor(op.output("Out")[0])

    def run():
        if not isinstance(src._array, ReaderHolder):
            raise PreconditionNotMet(f"create_double_buffer_reader: {op.input('UnderlyingReader')[0]!r} "
                                     f"holds no reader")
        out._array = src._array.buffered()
    return run


def _prepare_read(ctx, op):
    reader_name = op.input("Reader")[0]
    src = ctx.tensor(reader_name)
    names = list(op.output("Out"))
    outs = [ctx.tensor(n) for n in names]
    drop_last, throw_eof = op.attr("drop_last"), op.attr("throw_eof_exp")
    mem, backend = ctx.memory, ctx.backend

    def run():
        holder = src._array
        if not isinstance(holder, ReaderHolder):
            raise PreconditionNotMet(f"read: {reader_name!r} holds no reader")
        batch = holder.read(ctx.run_ctx.get("reader_device", 0), drop_last)
        if batch is None:
            if throw_eof:
                raise EOFException(f"{EOF_MESSAGE} (the epoch has ended: call loader.reset(), then "
                                   f"loader.start() for the next one)")
            batch = empty_batch(holder.shapes, holder.dtypes)
        else:  # an empty list from the generator too: it names the feed list instead of feeding nothing
            check_batch(batch, names, holder.shapes, holder.dtypes, holder.need_check)
        for t, a in zip(outs, batch):
            a = to_device(a, backend)
            old = t._array
            t._array = a
            mem.live += a.nbytes - (old.nbytes if old is not None else 0)
        if mem.live > mem.peak:
            mem.peak = mem.live
    return run


_READER_ATTRS = {"shape_concat": [], "ranks": [], "lod_levels": [], "dtypes": [], "need_check_feed": [],
                 "use_data_config": True, "device_index": 0, "device_count": 1}

register_op("create_py_reader", ["blocking_queue"], ["Out"], _READER_ATTRS, prepare=_prepare_create_py_reader)
register_op("create_double_buffer_reader", ["UnderlyingReader"], ["Out"], {"place": "AUTO"},
            prepare=_prepare_double_buffer)
register_op("read", ["Reader"], ["Out*"], {"throw_eof_exp": True, "drop_last": True, "infer_out": True},
            prepare=_prepare_read)
