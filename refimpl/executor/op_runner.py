"""How one op runs: the closures a prepared block's steps call.

Mirrors the part of Paddle's ``OperatorWithKernel::RunImpl``
(``paddle/fluid/framework/operator.cc``) that runs once the kernel is chosen:
read the input tensors, call the kernel, store its outputs. Here the
reading and storing are bound once, at prepare time, into one closure per op
(``PreparedBlock`` in ``prepared.py`` builds them): :func:`kernel_runner`
spells out the common arities so a run is one call with pre-bound
arguments, :func:`writer` stores a kernel's results and counts their bytes
into ``Memory``, and a failure goes to the block's ``fail`` callback, which
raises the located error.
"""
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from refimpl.core.tensor import DenseTensor

from .garbage_collector import Memory

NO_TENSOR = DenseTensor()  # stands for an empty optional slot: its _array is always None


def reader(t: Union[DenseTensor, List[DenseTensor]], nnb: bool) -> Callable[[], Any]:
    """How a kernel reads one input slot: the array, or (no-need-buffer) its shape when freed."""
    if isinstance(t, list):
        if nnb:
            return lambda: [x._array if x._array is not None else x._meta for x in t]
        return lambda: [x._array for x in t]
    if nnb:
        return lambda: t._array if t._array is not None else t._meta
    return lambda: t._array


def writer(outs: Sequence[Any], single: bool, mem: Memory) -> Callable[[Any], None]:
    """Store a kernel's result in the output tensors, counting bytes (see the registry's convention)."""
    if single and outs[0] is not None and not isinstance(outs[0], list):
        out = outs[0]

        def write_one(a):
            if a is None:
                return
            old = out._array
            out._array = a
            live = mem.live + a.nbytes - (old.nbytes if old is not None else 0)
            mem.live = live
            if live > mem.peak:
                mem.peak = live
        return write_one
    if len(outs) == 2 and not any(isinstance(o, list) for o in outs):  # grads of two inputs, updates
        pair = tuple(outs)

        def write_two(res):
            live = mem.live
            for t, a in zip(pair, res):
                if t is not None and a is not None:
                    old = t._array
                    t._array = a
                    live += a.nbytes - (old.nbytes if old is not None else 0)
            mem.live = live
            if live > mem.peak:
                mem.peak = live
        return write_two
    slots = tuple((o, isinstance(o, list)) for o in outs)

    def write(res):
        if single:
            res = (res,)
        live = mem.live
        for (o, many), r in zip(slots, res):
            if o is None or r is None:
                continue
            for t, a in (zip(o, r) if many else ((o, r),)):
                old = t._array
                t._array = a
                live += a.nbytes - (old.nbytes if old is not None else 0)
        mem.live = live
        if live > mem.peak:
            mem.peak = live
    return write


def kernel_runner(fn: Callable[..., Any], ins: Sequence[DenseTensor],
                  readers: Optional[Sequence[Callable[[], Any]]], kw: Dict[str, Any],
                  write: Callable[[Any], None], fail: Callable[[Exception], None]) -> Callable[[], None]:
    """The closure the run loop calls for one kernel op; the common arities are spelled out."""
    if readers is None and len(ins) == 1:
        a, = ins

        def run1():
            try:
                write(fn(a._array, **kw))
            except Exception as exc:
                fail(exc)
        return run1
    if readers is None and len(ins) == 2:
        a, b = ins

        def run2():
            try:
                write(fn(a._array, b._array, **kw))
            except Exception as exc:
                fail(exc)
        return run2
    if readers is None and len(ins) == 3:
        a, b, c = ins

        def run3():
            try:
                write(fn(a._array, b._array, c._array, **kw))
            except Exception as exc:
                fail(exc)
        return run3
    if readers is None and len(ins) == 4:
        a, b, c, d = ins

        def run4():
            try:
                write(fn(a._array, b._array, c._array, d._array, **kw))
            except Exception as exc:
                fail(exc)
        return run4
    if readers is None:
        def run_plain():
            try:
                write(fn(*[t._array for t in ins], **kw))
            except Exception as exc:
                fail(exc)
        return run_plain

    def run():
        try:
            write(fn(*[r() for r in readers], **kw))
        except Exception as exc:
            fail(exc)
    return run


def guarded(run: Callable[[], None], fail: Callable[[Exception], None]) -> Callable[[], None]:
    """A prepare hook's runner, failing with a located error like kernel runners."""
    def run_hook():
        try:
            run()
        except Exception as exc:
            fail(exc)
    return run_hook


def before(hook: Callable[[], None], run: Callable[[], None]) -> Callable[[], None]:
    def run_after_hook():
        hook()
        run()
    return run_after_hook
