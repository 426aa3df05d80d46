"""The op registry: one table entry per op type.

Mirrors what Paddle spreads over ``OpProto`` (slots and attrs),
``OpInfoMap`` (grad-op makers, no-need-buffer inferers, in-place pairs),
compile-time InferShape and the kernel registry. Here one :class:`OpDef`
holds all of it, and a backend adds kernels under its own key ("numpy",
"cuda").

Kernel convention (the only thing a backend implements): a kernel is a plain
function whose positional parameters are the input slots in declared order
(an array, ``None`` for an empty optional slot, a list for a duplicable slot)
followed by keyword-only parameters named after the attrs it reads. It
returns the output arrays in declared output-slot order: a single array when
the op has one output slot, else a tuple (a list inside it for a duplicable
slot). Outputs whose slot is empty in the program are simply not written.

An op whose behaviour needs the executor (``conditional_block``, ``feed``)
registers a ``prepare`` hook instead of a kernel; see ``executor/prepared.py``.
"""
import inspect

from refimpl.core.errors import NotFound, InvalidArgument

GRAD_SUFFIX = "@GRAD"
EMPTY_VAR_NAME = "@EMPTY@"


class Slot:
    __slots__ = ("name", "duplicable", "dispensable")

    def __init__(self, name, duplicable=False, dispensable=False):
        self.name, self.duplicable, self.dispensable = name, duplicable, dispensable

    def __repr__(self):
        return self.name + ("*" if self.duplicable else "") + ("?" if self.dispensable else "")


def _parse_slots(specs):
    """``"X"`` plain, ``"X*"`` duplicable, ``"X?"`` dispensable (optional)."""
    slots = []
    for s in specs:
        name = s.rstrip("*?")
        slots.append(Slot(name, "*" in s[len(name):], "?" in s[len(name):]))
    return slots


class OpDef:
    """Everything refimpl knows about one op type."""

    def __init__(self, type, inputs, outputs, attrs, infer_shape=None, grad=None,
                 no_need_buffer=(), inplace=None, prepare=None, check=None, writes_inputs=False,
                 extra_attrs=None):
        self.type = type
        self.inputs = _parse_slots(inputs)
        self.outputs = _parse_slots(outputs)
        self.attrs = dict(attrs)              # proto attrs with their defaults
        # Paddle's "extra" attrs: known to the kernel with a default, but an op built from Python has
        # them only when they are given (they are not in its attr_names), e.g. dropout's seed/fix_seed
        self.extra_attrs = dict(extra_attrs or {})
        self.infer_shape = infer_shape        # f(op, block) -> sets output var shapes
        self.grad = grad                      # grad maker, see ops/grad_maker.py
        self.no_need_buffer = tuple(no_need_buffer)
        self.inplace = dict(inplace or {})    # output slot -> input slot
        self.prepare = prepare                # executor hook for control-flow ops
        self.check = check                    # {"same_shape": slots, "one_value": slots} for in-place updates
        # True when the kernel may write into an input array it also returns (optimizer updates,
        # collectives on a coalesced buffer): the executor cannot undo such a write after a failure
        self.writes_inputs = bool(writes_inputs)
        self.kernels = {}                     # backend -> (fn, attr names it reads, wants need)

    def default(self, name):
        """The default of attr ``name``, proto or extra."""
        return self.attrs[name] if name in self.attrs else self.extra_attrs[name]

    def input_slot_names(self):
        return [s.name for s in self.inputs]

    def output_slot_names(self):
        return [s.name for s in self.outputs]

    def kernel(self, backend="numpy"):
        entry = self.kernels.get(backend)
        if entry is None:
            raise NotFound(f"op {self.type!r} has no kernel for backend {backend!r}")
        return entry

    def __repr__(self):
        return f"OpDef({self.type}, in={self.inputs}, out={self.outputs})"


OPS = {}


def register_op(type, inputs=(), outputs=(), attrs=None, **kw):
    """Register an op type; use as a decorator on its NumPy kernel (or call plainly)."""
    opdef = OpDef(type, inputs, outputs, attrs or {}, **kw)
    OPS[type] = opdef

    def decorate(fn):
        register_kernel(type, "numpy", fn)
        return fn

    return decorate


def register_kernel(type, backend, fn):
    """Add a kernel for ``type`` under ``backend``; attrs it reads come from its signature."""
    opdef = get_op_def(type)
    params = inspect.signature(fn).parameters.values()
    attr_names = tuple(p.name for p in params if p.kind is p.KEYWORD_ONLY and p.name != "need")
    wants_need = any(p.name == "need" for p in params)
    for a in attr_names:
        if a not in opdef.attrs and a not in opdef.extra_attrs:
            raise InvalidArgument(f"kernel for {type!r} reads attr {a!r}, which the op does not declare")
    opdef.kernels[backend] = (fn, attr_names, wants_need)


def get_op_def(type):
    opdef = OPS.get(type)
    if opdef is None:
        raise NotFound(f"operator {type!r} is not registered")
    return opdef


def has_op(type):
    return type in OPS


def grad_var_name(name):
    return name + GRAD_SUFFIX


def strip_grad_suffix(name):
    """``x@GRAD@RENAME@block0@1`` -> ``x`` (Paddle's ``_strip_grad_suffix_``)."""
    pos = name.find(GRAD_SUFFIX)
    return name[:pos] if pos != -1 else name
