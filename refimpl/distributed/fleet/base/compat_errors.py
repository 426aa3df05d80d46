"""Typed fleet errors that are also the builtin exception Paddle raises.

Paddle's fleet code reports many problems with a bare ``assert`` (an
``AssertionError``, often without a message) or with whatever Python or
protobuf raised inside it (``TypeError``, ``AttributeError``). refimpl
raises its own typed errors (``refimpl.core.errors``) with a message that
says what was wrong, and makes each one *also* an instance of the builtin
Paddle raised, so code written against Paddle (``except AssertionError``,
``pytest.raises(TypeError)``) keeps working. ``str(exc)`` starts with the
refimpl kind, e.g. ``(InvalidArgument) key:bogus not in gradient_configs``.
"""
from refimpl.core.errors import InvalidArgument, OutOfRange, PreconditionNotMet


def _both(base, builtin, name):
    cls = type(name, (base, builtin), {"kind": base.kind})
    cls.__doc__ = f"{base.kind} that is also a builtin {builtin.__name__} (what Paddle raises here)."
    cls.__module__ = __name__
    return cls


#: a bad argument where Paddle asserts (unknown config key, bad coordinate ...)
InvalidArgumentAssertion = _both(InvalidArgument, AssertionError, "InvalidArgumentAssertion")
#: a value of the wrong type (Paddle: TypeError from Python or protobuf)
InvalidArgumentType = _both(InvalidArgument, TypeError, "InvalidArgumentType")
#: assigning a dict to a nested message field (Paddle: protobuf AttributeError)
InvalidArgumentAttribute = _both(InvalidArgument, AttributeError, "InvalidArgumentAttribute")
#: an accessor called by the wrong role (Paddle: AssertionError)
PreconditionAssertion = _both(PreconditionNotMet, AssertionError, "PreconditionAssertion")
#: a call that needs what has not happened yet, where Paddle raises ValueError (no runtime handler ...)
PreconditionValue = _both(PreconditionNotMet, ValueError, "PreconditionValue")
#: a rank or coordinate outside the topology (Paddle: AssertionError)
OutOfRangeAssertion = _both(OutOfRange, AssertionError, "OutOfRangeAssertion")

__all__ = ["InvalidArgumentAssertion", "InvalidArgumentType", "InvalidArgumentAttribute",
           "PreconditionAssertion", "PreconditionValue", "OutOfRangeAssertion"]
