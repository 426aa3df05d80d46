"""Paddle's error classes.

Mirrors the error types of ``paddle/phi/core/enforce.h`` and
``paddle/common/errors.h`` (InvalidArgument, NotFound, ...). In Paddle they all
surface in Python as one C++ exception type whose message starts with the
class name; here each is a real Python class, a subclass of the common
:class:`EnforceNotMet` and of the matching builtin, so that
``except ValueError`` and ``except refimpl.core.errors.InvalidArgument`` both
work.
"""


class EnforceNotMet(Exception):
    """Base of every error refimpl raises on purpose."""

    kind = "EnforceNotMet"

    def __str__(self):
        msg = self.args[0] if len(self.args) == 1 else ", ".join(map(str, self.args))
        return f"({self.kind}) {msg}"


def _make(name, builtin):
    cls = type(name, (EnforceNotMet, builtin), {"kind": name})
    cls.__doc__ = f"Paddle's {name} error (also a {builtin.__name__})."
    cls.__str__ = EnforceNotMet.__str__  # KeyError's own __str__ would quote the message
    return cls


InvalidArgument = _make("InvalidArgument", ValueError)
NotFound = _make("NotFound", KeyError)
OutOfRange = _make("OutOfRange", IndexError)
AlreadyExists = _make("AlreadyExists", ValueError)
ResourceExhausted = _make("ResourceExhausted", MemoryError)
PreconditionNotMet = _make("PreconditionNotMet", RuntimeError)
PermissionDenied = _make("PermissionDenied", PermissionError)
ExecutionTimeout = _make("ExecutionTimeout", TimeoutError)
Unimplemented = _make("Unimplemented", NotImplementedError)
Unavailable = _make("Unavailable", RuntimeError)
Fatal = _make("Fatal", RuntimeError)
External = _make("External", RuntimeError)


class EOFException(EnforceNotMet):
    """Paddle's ``paddle.base.core.EOFException``: the epoch's data is used up (the ``read`` op raises it)."""

    kind = "EOFException"

__all__ = [
    "EnforceNotMet", "InvalidArgument", "NotFound", "OutOfRange", "AlreadyExists",
    "ResourceExhausted", "PreconditionNotMet", "PermissionDenied",
    "ExecutionTimeout", "Unimplemented", "Unavailable", "Fatal", "External", "EOFException",
]
