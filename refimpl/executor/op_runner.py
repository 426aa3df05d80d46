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
import functools
import types
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from refimpl.core.errors import PreconditionNotMet
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


def writer(outs: Sequence[Any], single: bool, mem: Memory,
           cats: Optional[Sequence[Any]] = None) -> Callable[[Any], None]:
    """Store a kernel's result in the output tensors, counting bytes (see the registry's convention).

    ``cats`` gives, parallel to ``outs``, each output's counted category in ``mem`` (None: other, an
    int, or a list for a duplicable slot); without it every output counts as other."""
    by_cat, most = mem.by_cat, mem.max_by_cat
    if single and outs[0] is not None and not isinstance(outs[0], list):
        out = outs[0]
        c = cats[0] if cats is not None else None
        if c is None:
            def write_one(a):
                if a is None:
                    return
                old = out._array
                out._array = a
                d = a.nbytes - (old.nbytes if old is not None else 0)
                live = mem.live + d
                mem.live = live
                if live > mem.peak:
                    mem.peak = live
                    mem.peak_open = True  # by_cat is the peak's split until the total drops (Memory)
                elif d < 0 and mem.peak_open:
                    mem.close_peak()
            return write_one

        def write_one_counted(a):
            if a is None:
                return
            old = out._array
            out._array = a
            d = a.nbytes - (old.nbytes if old is not None else 0)
            live = mem.live + d
            mem.live = live
            if d < 0 and mem.peak_open:
                mem.close_peak()
            v = by_cat[c] + d
            by_cat[c] = v
            if v > most[c]:
                most[c] = v
            if live > mem.peak:
                mem.peak = live
                mem.peak_open = True
        return write_one_counted
    # every output tensor in slot order (a duplicable slot's tensors in a row), and, when some slot
    # is duplicable or the op has one slot, how to lay the kernel's result out the same way
    targets = tuple(t for o in outs for t in (o if isinstance(o, list) else (o,)))
    flat_cats = _flat_cats(outs, cats)
    counts = tuple(len(o) if isinstance(o, list) else None for o in outs)  # None: a plain slot
    flat = not single and all(n is None for n in counts)

    def layout(res):
        res = (res,) if single else res
        out = []
        for n, r in zip(counts, res):
            if n is None:
                out.append(r)
            else:
                out.extend(r if r is not None else (None,) * n)
        return out

    def write(res):
        if mem.peak_open:  # this op's outputs may raise one category and lower another: copy the peak now
            mem.close_peak()
        live = mem.live
        for t, c, a in zip(targets, flat_cats, res if flat else layout(res)):
            if t is not None and a is not None:
                old = t._array
                t._array = a
                d = a.nbytes - (old.nbytes if old is not None else 0)
                live += d
                if c >= 0:
                    v = by_cat[c] + d
                    by_cat[c] = v
                    if v > most[c]:
                        most[c] = v
        mem.live = live
        if live > mem.peak:
            mem.peak = live
            mem.peak_open = True
    return write


def _flat_cats(outs, cats):
    """``cats`` laid out as the flat target list (-1: other)."""
    flat = []
    for k, o in enumerate(outs):
        c = cats[k] if cats is not None else None
        if isinstance(o, list):
            flat.extend(-1 if ci is None else ci for ci in (c if isinstance(c, list) else [c] * len(o)))
        else:  # a plain slot, or an empty duplicable one (no tensor: never counted)
            flat.append(c if isinstance(c, int) else -1)
    return tuple(flat)


def kernel_runner(fn: Callable[..., Any], ins: Sequence[DenseTensor],
                  readers: Optional[Sequence[Callable[[], Any]]], kw: Dict[str, Any],
                  write: Callable[[Any], None], fail: Callable[[Exception], None]) -> Callable[[], None]:
    """The closure the run loop calls for one kernel op; the common arities are spelled out."""
    call = with_attrs(fn, kw)
    if readers is None and len(ins) == 1:
        a, = ins

        def run1():
            try:
                write(call(a._array))
            except Exception as exc:
                fail(exc)
        return run1
    if readers is None and len(ins) == 2:
        a, b = ins

        def run2():
            try:
                write(call(a._array, b._array))
            except Exception as exc:
                fail(exc)
        return run2
    if readers is None and len(ins) == 3:
        a, b, c = ins

        def run3():
            try:
                write(call(a._array, b._array, c._array))
            except Exception as exc:
                fail(exc)
        return run3
    if readers is None and len(ins) == 4:
        a, b, c, d = ins

        def run4():
            try:
                write(call(a._array, b._array, c._array, d._array))
            except Exception as exc:
                fail(exc)
        return run4
    if readers is None:
        def run_plain():
            try:
                write(call(*[t._array for t in ins]))
            except Exception as exc:
                fail(exc)
        return run_plain

    def run():
        try:
            write(call(*[r() for r in readers]))
        except Exception as exc:
            fail(exc)
    return run


def with_attrs(fn: Callable[..., Any], kw: Dict[str, Any]) -> Callable[..., Any]:
    """``fn`` with the op's attrs bound: called with the inputs only.

    A kernel reads its attrs as keyword-only parameters (the registry's convention). Passing
    them as ``**kw`` on every call builds a dict each time; instead a copy of the kernel
    function whose keyword-only defaults are the op's attrs is made once, at prepare time
    (the interpreter fills defaults without a dict). Anything that is not a plain function
    with those keyword-only parameters gets the attrs as ``**kw``.
    """
    code = getattr(fn, "__code__", None)
    if not kw or not isinstance(fn, types.FunctionType) or code is None:
        return fn if not kw else functools.partial(fn, **kw)
    kwonly = code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount]
    if not set(kw) <= set(kwonly):
        return functools.partial(fn, **kw)
    bound = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    bound.__kwdefaults__ = dict(fn.__kwdefaults__ or {}, **kw)
    bound.__qualname__, bound.__module__, bound.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
    return bound


def guarded(run: Callable[[], None], fail: Callable[[Exception], None]) -> Callable[[], None]:
    """A prepare hook's runner, failing with a located error like kernel runners."""
    def run_hook():
        try:
            run()
        except Exception as exc:
            fail(exc)
    return run_hook


def keeping_fused_memory(run: Callable[[], None], tensors: Sequence[Any], names: Sequence[str],
                         write_back: Callable[[Any, Any], bool]) -> Callable[[], None]:
    """``run``, after which each of ``tensors`` (vars ``names``) that held a view into a ``coalesce_tensor``
    buffer gets its new value copied into that view (``write_back``) and keeps the view, as Paddle's
    kernels write into the memory a var already has: the fused buffer and its other views see every write."""
    def run_in_fused_memory():
        olds = [t._array for t in tensors]
        run()
        for t, name, old in zip(tensors, names, olds):
            new = t._array
            if new is not old and old is not None and new is not None:
                try:
                    kept = write_back(old, new)
                except PreconditionNotMet as exc:
                    raise PreconditionNotMet(f"output {name!r}: {exc.args[0]}") from None
                if kept:
                    t._array = old
    return run_in_fused_memory


def detaching_fused_views(run: Callable[[], None], tensors: Sequence[Any],
                          detach: Callable[[Any], Any]) -> Callable[[], None]:
    """``run`` (an op reading a fused buffer's var), after which none of ``tensors`` -- outputs that are no
    buffer's members -- holds a view into a ``coalesce_tensor`` buffer (``detach`` copies it out)."""
    def run_detached():
        run()
        for t in tensors:
            a = t._array
            if a is not None:
                t._array = detach(a)
    return run_detached


def before(hook: Callable[[], None], run: Callable[[], None]) -> Callable[[], None]:
    def run_after_hook():
        hook()
        run()
    return run_after_hook
