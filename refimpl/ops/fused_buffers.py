"""The buffers ``coalesce_tensor`` makes, and the vars that live in them.

Paddle's ``coalesce_tensor`` (``paddle/phi/kernels/coalesce_tensor_kernel.cc``) gives its outputs
memory inside one fused allocation; every later write to such a var goes into that memory (a
kernel writes into the allocation a var already has), so the fused var sees it, and ops on the
fused var (a fused all-reduce, a fused sum) are seen by the members. refimpl's kernels return new
arrays, so the executor puts them back (``refimpl/executor/op_runner.py``
``keeping_fused_memory``) with :func:`write_into_fused`, and keeps every other var out of the
buffers with :func:`outside_fused`. The registry holds weak references to the buffers made.
"""
import weakref

import numpy as np

from refimpl.core.errors import PreconditionNotMet

_fused = {}  # id(buffer) -> weakref, for the buffers coalesce_tensor made


def register_fused(buf):
    key = id(buf)
    _fused[key] = weakref.ref(buf, lambda _, k=key: _fused.pop(k, None))


def in_fused(a):
    root = a
    while isinstance(root.base, np.ndarray):
        root = root.base
    ref = _fused.get(id(root))
    return ref is not None and ref() is root


def write_into_fused(old, new) -> bool:
    """Copy ``new`` into ``old`` when ``old`` lies in a ``coalesce_tensor`` buffer; returns whether it did.

    The executor calls this after an op wrote a var a ``coalesce_tensor`` made part of a fused buffer:
    the var keeps its memory, as Paddle's kernels write into an allocation of the right size, so the
    buffer and its other views see the value. A value of another size or dtype cannot go there:
    PreconditionNotMet (the var would silently leave the buffer).
    """
    if not (isinstance(old, np.ndarray) and isinstance(new, np.ndarray) and in_fused(old)):
        return False
    if new.size != old.size or new.dtype != old.dtype:
        raise PreconditionNotMet(f"a value of shape {list(new.shape)} {new.dtype} does not fit its place in the "
                                 f"coalesce_tensor buffer ({list(old.shape)} {old.dtype})")
    np.copyto(old, new.reshape(old.shape))
    return True


def outside_fused(a):
    """``a``, or a copy of it when it lies in a ``coalesce_tensor`` buffer: a var the buffer does not own (a
    reshape's output, say) keeps its value when the buffer is written later, as Paddle's kernels copy."""
    return a.copy() if isinstance(a, np.ndarray) and in_fused(a) else a
