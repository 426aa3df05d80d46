"""Scope: the tree of name -> variable holders that a program runs in.

Mirrors ``paddle/fluid/framework/scope.h``. ``var(name)`` finds or creates a
variable in this scope, ``find_var(name)`` looks here and then up the parents,
``new_scope()`` makes a kid. ``global_scope()`` is per thread (in-process
ranks are threads), the main thread's being the process's. The executor keeps persistable variables in the
scope it is given and everything else in a kid scope it owns, as Paddle does.
Unlike Paddle, a variable holds exactly one kind of value: a DenseTensor (or
any Python object set with ``set_value``, used for scope lists and the like).
"""
import contextlib
import threading

from .errors import InvalidArgument, NotFound
from .tensor import DenseTensor


class ScopeVar:
    """A named holder in a scope (Paddle's ``framework::Variable``)."""

    __slots__ = ("name", "tensor", "value")

    def __init__(self, name):
        self.name = name
        self.tensor = DenseTensor()
        self.value = None

    def get_tensor(self):
        return self.tensor

    def is_initialized(self):
        return self.tensor._array is not None or self.value is not None

    def set_value(self, value):
        self.value = value

    def get_value(self):
        return self.value

    def __repr__(self):
        return f"ScopeVar({self.name!r}, {self.tensor!r})"


class Scope:
    def __init__(self, parent=None):
        self._parent = parent
        self._vars = {}
        self._kids = []

    def var(self, name):
        """Find ``name`` in this scope or create it here."""
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"Scope.var: a variable name must be a non-empty string, got {name!r}")
        v = self._vars.get(name)
        if v is None:
            v = self._vars[name] = ScopeVar(name)
        return v

    def find_var(self, name):
        """The variable named ``name`` here or in an ancestor, else None."""
        s = self
        while s is not None:
            v = s._vars.get(name)
            if v is not None:
                return v
            s = s._parent
        return None

    def find_local_var(self, name):
        return self._vars.get(name)

    def get(self, name):
        """The variable ``name`` (searching parents); NotFound if absent."""
        v = self.find_var(name)
        if v is None:
            raise NotFound(f"variable {name!r} is not in the scope or its parents")
        return v

    def new_scope(self):
        kid = Scope(self)
        self._kids.append(kid)
        return kid

    def drop_kids(self):
        self._kids.clear()

    def delete_scope(self, kid):
        """Forget one kid scope (Paddle's ``Scope::DeleteScope``)."""
        self._kids = [k for k in self._kids if k is not kid]

    def share_var(self, var):
        """Hold the very same variable as another scope does (its value is shared, not copied)."""
        if not isinstance(var, ScopeVar):
            raise InvalidArgument(f"Scope.share_var expects a scope variable, got {type(var).__name__}")
        self._vars[var.name] = var
        return var

    def has_kid(self, scope):
        return any(k is scope for k in self._kids)

    def kids(self):
        return list(self._kids)

    def parent(self):
        return self._parent

    def erase_vars(self, names):
        for n in names:
            self._vars.pop(n, None)

    def local_var_names(self):
        return list(self._vars)

    def __repr__(self):
        return f"Scope(vars={len(self._vars)}, kids={len(self._kids)})"


_global_scope = Scope()
_local = threading.local()  # in-process ranks are threads: each gets a global scope of its own


def _stack():
    st = getattr(_local, "stack", None)
    if st is None:
        main = threading.current_thread() is threading.main_thread()
        st = _local.stack = [_global_scope if main else Scope()]
    return st


def global_scope():
    """The scope used when none is given (the innermost ``scope_guard``)."""
    return _stack()[-1]


@contextlib.contextmanager
def scope_guard(scope):
    if not isinstance(scope, Scope):
        raise InvalidArgument(f"scope_guard expects a Scope, got {type(scope).__name__}")
    _stack().append(scope)
    try:
        yield scope
    finally:
        _stack().pop()
