"""Compile every kernel the backend launches with the real CUDA toolchain — no GPU needed.

Plays the part of Paddle's build, where nvcc compiles each ``.cu`` kernel for
the GPU architectures it ships for. numba compiles a kernel only when it is
first launched, and the simulator (the only way to run kernels without a GPU)
never calls the compiler at all: a kernel the simulator runs happily can
still be rejected by numba's CUDA typing or by NVVM. This module closes that
gap in two steps:

1. **record** — while kernels run (under the simulator), every launch adds
   ``(recipe, argument types)`` to a set: the recipe says how to make the
   kernel again (a module-level kernel by name; a kernel a factory makes per
   dtype by factory and dtype, see ``device.tag``), the argument types are
   what numba's dispatcher would see on a GPU.
2. **compile** — in a process without the simulator, each recorded kernel is
   compiled by numba's CUDA compiler (NVVM) to PTX for the target
   architecture, and the PTX is assembled by nvJitLink into a cubin (SASS),
   exactly the code a GPU of that architecture would load.

    REFIMPL_RECORD_LAUNCHES=launches.json NUMBA_ENABLE_CUDASIM=1 pytest tests/conformance
    python -m cuda_backend.compile_check launches.json --arch sm_90

It needs numba-cuda's compiler libraries (``pip install "numba-cuda[cu13]"``:
NVVM, NVRTC, nvJitLink), not a GPU or a driver.

A launches file is data, not code: :func:`load_launches` checks every entry
before anything is imported, and only modules of this package
(``cuda_backend.*``) may be named, so a file naming ``os``, another
package or a path is refused with ``InvalidArgument`` naming the entry.
"""
import argparse
import contextlib
import importlib
import json
import os
import re
import sys
import threading
import time

import numpy as np

from refimpl.core.errors import InvalidArgument

from . import OP_MODULES, device

_KINDS = {"global": 3, "functor": 5, "factory": 4}  # recipe kind -> its length (see ``resolve``)
_MODULE = re.compile(r"cuda_backend(\.[A-Za-z_][A-Za-z0-9_]*)*")
_QUALNAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


class CompileError(RuntimeError):
    """One or more recorded kernels do not compile for the target; the message names each one."""


# ---- record ------------------------------------------------------------------------------------
def describe(arg):
    """A JSON-able description of a kernel argument's numba type."""
    if arg is None:
        return ["none"]
    if isinstance(arg, (bool, np.bool_)):
        return ["bool"]
    if isinstance(arg, np.generic):
        return ["scalar", arg.dtype.str]
    if isinstance(arg, int):
        return ["int"]
    if isinstance(arg, float):
        return ["float"]
    if isinstance(arg, tuple):
        return ["tuple", [describe(a) for a in arg]]
    if device.is_device(arg) or isinstance(arg, np.ndarray):
        flags = arg.flags
        layout = "C" if flags["C_CONTIGUOUS"] else "F" if flags["F_CONTIGUOUS"] else "A"
        return ["array", np.dtype(arg.dtype).str, int(arg.ndim), layout]
    raise TypeError(f"compile_check: cannot describe a kernel argument of type {type(arg).__name__}")


def recipe(kernel):
    """How to make ``kernel`` again in another process (a tuple of strings)."""
    tagged = getattr(kernel, "refimpl_recipe", None)
    if tagged is not None:
        return list(tagged)
    fn = getattr(kernel, "py_func", None) or getattr(kernel, "fn", None)  # real dispatcher / simulator
    mod = importlib.import_module(fn.__module__)
    if getattr(mod, fn.__qualname__, None) is not kernel:
        raise CompileError(f"compile_check: kernel {fn.__module__}.{fn.__qualname__} is made by a factory "
                           f"that does not tag it (cuda_backend.device.tag)")
    return ["global", fn.__module__, fn.__qualname__]


class Recorder:
    """Collects the distinct (recipe, argument types) of every launch while installed."""

    def __init__(self):
        self.launches, self._lock = set(), threading.Lock()

    def __call__(self, kernel, args):
        key = json.dumps([recipe(kernel), [describe(a) for a in args]])
        with self._lock:
            self.launches.add(key)

    def __enter__(self):
        device.LAUNCH_HOOKS.append(self)
        return self

    def __exit__(self, *exc):
        device.LAUNCH_HOOKS.remove(self)

    def save(self, path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump([json.loads(k) for k in sorted(self.launches)], f, indent=0)


# ---- compile ----------------------------------------------------------------------------------
def numba_type(desc):
    from numba import from_dtype, types
    kind = desc[0]
    if kind == "none":
        return types.none
    if kind == "bool":
        return types.boolean
    if kind == "int":
        return types.int64
    if kind == "float":
        return types.float64
    if kind == "scalar":
        return from_dtype(np.dtype(desc[1]))
    if kind == "tuple":
        return types.BaseTuple.from_types([numba_type(d) for d in desc[1]])
    if kind == "array":
        return types.Array(from_dtype(np.dtype(desc[1])), desc[2], desc[3])
    raise ValueError(f"compile_check: unknown argument description {desc!r}")


def resolve(rec):
    """The kernel (a real numba dispatcher) a recipe names."""
    kind, module, qualname = rec[:3]
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if kind == "global":
        return obj
    if kind == "functor":
        return obj.kernels(np.dtype(rec[3]))[rec[4]]
    if kind == "factory":
        return obj(np.dtype(rec[3]).type)
    raise ValueError(f"compile_check: unknown recipe {rec!r}")


def check_entry(entry, where):
    """Raise InvalidArgument (naming ``where``) unless ``entry`` is ``[recipe, argument descriptions]``
    whose recipe names a kernel of a ``cuda_backend`` module; nothing is imported here."""
    if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], list)
            and isinstance(entry[1], list)):
        raise InvalidArgument(f"compile_check: {where} is not [recipe, argument types]: {entry!r:.200}")
    rec = entry[0]
    if not rec or rec[0] not in _KINDS or len(rec) != _KINDS[rec[0]]:
        raise InvalidArgument(f"compile_check: {where} has an unknown recipe {rec!r:.200}; expected one of "
                              f"{sorted(_KINDS)} with its fields (cuda_backend.compile_check.resolve)")
    if not all(isinstance(r, (str, int)) and not isinstance(r, bool) for r in rec):
        raise InvalidArgument(f"compile_check: {where}: recipe fields must be strings or ints: {rec!r:.200}")
    module, qualname = rec[1], rec[2]
    if not isinstance(module, str) or not _MODULE.fullmatch(module) or "__" in module:
        raise InvalidArgument(f"compile_check: {where} names module {module!r:.200}; only modules of the "
                              f"cuda_backend package are imported")
    if not isinstance(qualname, str) or not _QUALNAME.fullmatch(qualname) or "__" in qualname:
        raise InvalidArgument(f"compile_check: {where} names {qualname!r:.200} in {module}, which is not a "
                              f"kernel's (dotted) name")


def load_launches(path):
    """The launches recorded in the JSON file ``path``, each checked by :func:`check_entry` (module docstring)."""
    try:
        with open(path) as f:
            launches = json.load(f)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"compile_check: {path} is not JSON: {exc}") from None
    if not isinstance(launches, list):
        raise InvalidArgument(f"compile_check: {path} holds a {type(launches).__name__}, not a list of launches")
    for i, entry in enumerate(launches):
        check_entry(entry, f"entry {i} of {path}")
    return launches


def name_of(rec):
    return ":".join(str(r) for r in rec[1:])


@contextlib.contextmanager
def target_device(cc):
    """Device functions are compiled for ``get_current_device()``'s capability: name ours instead."""
    from numba.cuda import dispatcher
    saved = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: type("Target", (), {"compute_capability": cc})()
    try:
        yield
    finally:
        dispatcher.get_current_device = saved


def compile_one(rec, arg_descs, arch, cubin=True):
    """PTX (and, with ``cubin``, the size of the cubin) for one recorded launch; raises on failure."""
    from numba import cuda
    kernel = resolve(rec)
    sig = tuple(numba_type(d) for d in arg_descs)
    cc = (int(arch[3:-1]), int(arch[-1]))
    with target_device(cc):
        ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=cc,
                                  fastmath=kernel.targetoptions.get("fastmath", False))
    size = None
    if cubin:
        from cuda.core import Program, ProgramOptions
        code = Program(ptx, code_type="ptx", options=ProgramOptions(arch=arch)).compile("cubin").code
        if code[:4] != b"\x7fELF":
            raise CompileError(f"{name_of(rec)}: nvJitLink did not return an ELF cubin")
        size = len(code)
    return ptx, size


def compile_all(launches, arch="sm_90", cubin=True, out=None):
    """Compile every recorded launch; returns {kernel name: count}; raises CompileError naming failures."""
    if device.simulated():
        raise CompileError("compile_check needs numba's real CUDA target: unset NUMBA_ENABLE_CUDASIM")
    failures, done = [], {}
    t0 = time.perf_counter()
    for i, (rec, descs) in enumerate(launches):
        name = name_of(rec)
        try:
            compile_one(rec, descs, arch, cubin)
            done[name] = done.get(name, 0) + 1
        except Exception as exc:  # noqa: BLE001  (every failure is collected and reported by name)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            failures.append(f"{name} {json.dumps(descs)}: {type(exc).__name__}: {first}")
        if out is not None and (out.isatty() or (i + 1) % 50 == 0 or i + 1 == len(launches)):
            end = "" if out.isatty() else "\n"
            print(f"\r[{i + 1}/{len(launches)}] {time.perf_counter() - t0:5.1f} s  {name[:60]:60}",
                  end=end, file=out, flush=True)
    if out is not None and out.isatty():
        print(file=out)
    if failures:
        raise CompileError(f"{len(failures)} of {len(launches)} kernel launches do not compile for {arch}:\n  "
                           + "\n  ".join(failures))
    return done


def defined_kernels():
    """Names (as in :func:`name_of`, less the dtype) of every kernel, functor and factory the backend defines."""
    from numba.cuda.dispatcher import CUDADispatcher
    from .ew import Functor
    names = set()
    for short in ("ew",) + OP_MODULES:
        mod = importlib.import_module(f"{__package__}.{short}")
        for attr, obj in vars(mod).items():  # defined here, not imported: a kernel or a functor
            if isinstance(obj, CUDADispatcher) and not obj.targetoptions.get("device"):
                fn = obj.py_func
            elif isinstance(obj, Functor):
                fn = obj.make
            else:
                continue
            if fn.__module__ == mod.__name__:
                names.add(f"{mod.__name__}:{attr}")
    return names | set(device.FACTORIES)


def unlaunched(launches):
    """Kernels the backend defines that no recorded launch used (never run, never compiled)."""
    seen = {f"{rec[1]}:{rec[2]}" for rec, _ in launches}
    return sorted(defined_kernels() - seen)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m cuda_backend.compile_check", description=__doc__.split("\n")[0])
    ap.add_argument("launches", help="JSON file written by a run with REFIMPL_RECORD_LAUNCHES=FILE")
    ap.add_argument("--arch", default="sm_90", help="target architecture, e.g. sm_80, sm_90 (default sm_90)")
    ap.add_argument("--ptx-only", action="store_true", help="stop at PTX (skip nvJitLink's cubin)")
    ap.add_argument("--allow-unlaunched", action="store_true",
                    help="do not fail when a kernel the backend defines was never launched in the recording")
    args = ap.parse_args(argv)
    try:
        launches = load_launches(args.launches)
    except InvalidArgument as exc:
        print(exc, file=sys.stderr)
        return 2
    if not launches:
        print(f"compile_check: {args.launches} records no launches", file=sys.stderr)
        return 2
    missing = unlaunched(launches)
    if missing and not args.allow_unlaunched:
        print(f"compile_check: {len(missing)} kernels were never launched in {args.launches} (so neither run "
              f"under the simulator nor compiled): " + ", ".join(missing), file=sys.stderr)
        return 1
    try:
        done = compile_all(launches, args.arch, cubin=not args.ptx_only, out=sys.stderr)
    except CompileError as exc:
        print(exc, file=sys.stderr)
        return 1
    what = "PTX" if args.ptx_only else "PTX and cubin"
    print(f"compile_check: {len(launches)} launches of {len(done)} kernels compile to {what} for {args.arch}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
