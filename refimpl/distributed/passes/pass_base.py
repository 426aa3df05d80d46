"""Pass infrastructure: PassBase, register_pass, new_pass, PassContext, PassManager.

Mirrors ``paddle.distributed.passes.pass_base``. A *pass* is an object that
rewrites a list of (main, startup) program pairs. Passes are registered under
a name with :func:`register_pass` and built with :func:`new_pass`, which sets
the given attrs on the new object. :meth:`PassBase.apply` runs the pass and
records it, together with anything it wants to hand on (for pipeline passes:
the ``"plan"``), in a :class:`PassContext`.

Differences from Paddle:

* an unknown pass name raises :class:`~refimpl.core.errors.NotFound` (also an
  ``AssertionError``, which is what Paddle raises) naming the pass and listing
  the registered ones;
* there are no C++ passes (``CPPPassWrapper``) and no fusion-pass ordering
  rules; the one common rule kept is Paddle's "a pass type is applied at most
  once per context";
* :class:`PassManager` with ``auto_solve_conflict`` keeps, in the given order,
  every pass that passes ``_check_self`` and does not conflict with the passes
  already kept or applied (Paddle searches for the longest compatible chain;
  for the pass sets refimpl has the two agree).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, TYPE_CHECKING, Tuple, Type

from refimpl.core.errors import InvalidArgument, NotFound

if TYPE_CHECKING:
    from refimpl.framework.program import Program


class PassNotRegistered(NotFound, AssertionError):
    """``new_pass`` was given a name no pass is registered under."""


class PassContext:
    """What passes hand on to each other: applied passes and named attrs."""

    def __init__(self):
        self._applied_passes = []
        self._attrs = {}

    def set_attr(self, key: str, value: Any) -> None:
        self._attrs[key] = value

    def get_attr(self, key: str, default: Any = None) -> Any:
        return self._attrs.get(key, default)

    @property
    def passes(self) -> List[PassBase]:
        return self._applied_passes

    def _add_pass(self, pass_obj):
        self._applied_passes.append(pass_obj)

    def _pop_pass(self):
        del self._applied_passes[-1]


class PassType:
    UNKNOWN = 0
    COMM_OPT = 1
    CALC_OPT = 2
    PARALLEL_OPT = 3
    FUSION_OPT = 4


def _not_same_type_rule(pass_before, pass_after):
    return type(pass_before) is not type(pass_after)


class PassBase:
    """Base of every pass. Subclasses implement the three ``_`` hooks below."""

    _REGISTERED_PASSES = {}
    _COMMON_RULES = [_not_same_type_rule]

    name = None

    @staticmethod
    def _register(pass_name, pass_class):
        if not (isinstance(pass_class, type) and issubclass(pass_class, PassBase)):
            raise InvalidArgument(f"register_pass({pass_name!r}): {pass_class!r} is not a PassBase subclass")
        PassBase._REGISTERED_PASSES[pass_name] = pass_class

    def __init__(self):
        self._attrs = {}

    def set_attr(self, key: str, value: Any) -> PassBase:
        self._attrs[key] = value
        return self

    def get_attr(self, key: str, default: Any = None) -> Any:
        return self._attrs.get(key, default)

    # -- hooks -----------------------------------------------------------
    def _check_self(self):
        """False makes ``apply`` skip this pass (e.g. a required attr is unset)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _check_self()")

    def _check_conflict(self, other_pass):
        """False if this pass must not run after ``other_pass`` (already applied)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _check_conflict()")

    def _apply_single_impl(self, main_program, startup_program, context):
        raise NotImplementedError(f"{type(self).__name__} must implement _apply_single_impl()")

    def _type(self):
        return PassType.UNKNOWN

    # -- driver ----------------------------------------------------------
    def _check_conflict_including_common_rules(self, other_pass):
        return self._check_conflict(other_pass) and all(
            rule(other_pass, self) for rule in PassBase._COMMON_RULES)

    def apply(self, main_programs: Sequence[Program], startup_programs: Sequence[Optional[Program]],
              context: Optional[PassContext] = None) -> PassContext:
        """Run the pass on every (main, startup) pair; return the context.

        The pass is silently skipped (the context is returned unchanged) when
        ``_check_self()`` is false or it conflicts with an applied pass.
        """
        if context is None:
            context = PassContext()
        if not self._check_self():
            return context
        if not all(self._check_conflict_including_common_rules(p) for p in context.passes):
            return context
        if not isinstance(main_programs, list) or not isinstance(startup_programs, list):
            raise InvalidArgument(f"{self.name}: apply() takes lists of main and startup programs")
        if len(main_programs) != len(startup_programs):
            raise InvalidArgument(f"{self.name}: {len(main_programs)} main programs but "
                                  f"{len(startup_programs)} startup programs")
        self._apply_impl(main_programs, startup_programs, context)
        context._add_pass(self)
        return context

    def _apply_impl(self, main_programs, startup_programs, context):
        for main_program, startup_program in zip(main_programs, startup_programs):
            self._apply_single_impl(main_program, startup_program, context)

    def __repr__(self):
        return f"<pass {self.name} attrs={sorted(self._attrs)}>"


def register_pass(name: str) -> Callable[[Type[PassBase]], Type[PassBase]]:
    """Class decorator: make ``new_pass(name)`` build this class."""
    def impl(cls):
        PassBase._register(name, cls)
        cls.name = name
        return cls
    return impl


def new_pass(name: str, pass_attrs: Optional[Dict[str, Any]] = None) -> PassBase:
    """Build the pass registered as ``name`` and set ``pass_attrs`` on it."""
    pass_class = PassBase._REGISTERED_PASSES.get(name)
    if pass_class is None:
        known = ", ".join(sorted(PassBase._REGISTERED_PASSES))
        raise PassNotRegistered(f"Pass {name} is not registered (registered passes: {known})")
    pass_obj = pass_class()
    for key, value in (pass_attrs or {}).items():
        pass_obj.set_attr(key, value)
    return pass_obj


class PassManager:
    """Apply a sequence of passes with one shared context."""

    def __init__(self, passes: Sequence[PassBase], context: Optional[PassContext] = None,
                 auto_solve_conflict: bool = True) -> None:
        self._context = PassContext() if context is None else context
        if auto_solve_conflict:
            self._passes = self._compatible(passes)
        else:
            self._passes = list(passes)

    def _compatible(self, passes):
        kept = []
        for p in passes:
            if not p._check_self():
                continue
            earlier = list(self._context.passes) + kept
            if all(p._check_conflict_including_common_rules(q) for q in earlier):
                kept.append(p)
        return kept

    def apply(self, main_programs: Sequence[Program],
              startup_programs: Sequence[Optional[Program]]) -> PassContext:
        for p in self._passes:
            self._context = p.apply(main_programs, startup_programs, self._context)
        return self._context

    @property
    def context(self) -> PassContext:
        return self._context

    @property
    def names(self) -> List[str]:
        return [p.name for p in self._passes]

    @property
    def passes(self) -> Tuple[PassBase, ...]:
        return tuple(self._passes)
