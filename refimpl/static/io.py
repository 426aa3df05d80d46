"""Checkpoints: ``paddle.static.save``/``load``, ``save_persistables``/``load_persistables``,
``save_inference_model``/``load_inference_model``.

Mirrors ``python/paddle/static/io.py``: ``save(program, path)`` writes the
parameters to ``path.pdparams``, the other persistables (optimizer
accumulators, beta pows, learning rate, gradient-merge buffers and counters)
to ``path.pdopt`` and the program to ``path.pdmodel``; ``load`` reads them
back into the scope, naming any variable the file lacks. Differences from
Paddle:

* **No pickle.** Tensor files are NumPy ``.npz`` archives
  (``refimpl.core.npz_archive``, readable with ``np.load``); the program is
  ``program/v1`` JSON (``Program.to_dict``), not a protobuf.
* **Atomic, all or nothing for a reader.** Every file goes to a fsynced
  temporary file and is renamed into place (``refimpl.core.atomic_file``),
  so a crash leaves each file old or new, never partial. A save of several
  files (``save``: ``.pdparams``, ``.pdopt``, ``.pdmodel``;
  ``save_inference_model``: ``.pdmodel``, ``.pdiparams``) also commits as a
  whole: it draws a *save id*, stamps it into each file (the archives' zip
  comment, the inference document's ``save_id``; ``.pdmodel`` of ``save``
  is not read back and carries none), renames the files, and renames last
  a manifest ``<path>.manifest.json`` naming the id and each file's size.
  A loader checks the ids of the files it reads (``atomic_file.check_set``):
  two different ids (a kill between two renames) raise ``InvalidArgument``
  naming both files, so a reader never pairs files of two saves; files of
  one id are that save's whole files. Files without a stamp (an older
  refimpl, ``write_npz``, by hand) load as they are; next to a stamped
  file, only when the manifest commits that file's save.
  ``save_persistables`` writes one archive, atomic by its single rename.
* **Checked, all or nothing.** A truncated or corrupted file, a plain
  ``.npy``, an entry whose header does not match its size raise
  ``InvalidArgument`` naming the file and entry; a missing file or variable
  raises ``NotFound`` naming both; a shape or dtype that does not fit the
  program raises ``InvalidArgument``. Shapes and dtypes are checked from the
  ``.npy`` headers before any data is read, and the saved scheduler and
  random states are validated too, before the first variable is written:
  a failed load leaves the scope, the scheduler and the random state as
  they were.
* **LR scheduler.** When the program carries an ``LRScheduler``
  (``program.lr_scheduler``), its ``state_dict()`` is stored in the
  optimizer file under ``@LR_SCHEDULER@.<key>`` and restored with
  ``set_state_dict`` (Paddle saves it separately, with ``paddle.save``).
* **Random state.** The calling thread's global random state
  (``refimpl.core.random.get_state``: what ``dropout`` and the other random
  ops without a seed draw from) is stored in the optimizer file (and the
  ``save_persistables`` archive) under ``@RANDOM_STATE@.<key>`` and restored
  by a load of the whole checkpoint (no ``var_list``), so stopping and
  resuming equals never stopping, bit for bit. Paddle keeps it apart
  (``paddle.get_rng_state``); its loader would ignore these names, and a
  checkpoint without them leaves the random state alone.
* ``scope=`` (default ``global_scope()``) says where the variables live;
  ``main_program`` may also be a ``CompiledProgram`` or a pipeline ``Plan``
  (all of its job programs). ``save_persistables`` always writes one archive
  (``filename`` or ``__persistables__.npz``), never one file per variable.
"""
from __future__ import annotations

import contextlib
import json
import os
from typing import Any, Callable, Dict, IO, List, Mapping, Optional, Sequence, TYPE_CHECKING, Union

import numpy as np

from refimpl.core import atomic_file, npz_archive, random
from refimpl.core.errors import EnforceNotMet, InvalidArgument, NotFound
from refimpl.core.scope import global_scope
from refimpl.framework.program import Program, default_main_program
from refimpl.optimizer.lr_scheduler import flatten_state, unflatten_state

if TYPE_CHECKING:
    from refimpl.core.scope import Scope
    from refimpl.executor.executor import Executor
    from refimpl.framework.variable import Variable

LR_PREFIX = "@LR_SCHEDULER@."
RANDOM_PREFIX = "@RANDOM_STATE@."
DEFAULT_PERSISTABLES = "__persistables__.npz"
INFERENCE_FORMAT = "inference/v1"
_NOT_SAVED = ("FEED_MINIBATCH", "FETCH_LIST", "READER", "RAW", "STEP_SCOPES")
Writer = Callable[[IO[bytes]], Any]


# ---- files ------------------------------------------------------------------
def _npz_writer(arrays: Mapping[str, np.ndarray], save_id: Optional[str] = None) -> Writer:
    return lambda f: npz_archive.write(f, arrays, save_id)


def write_npz(path: str, arrays: Dict[str, np.ndarray]) -> None:
    """Write {name: array} to ``path`` atomically (a ``.npz`` archive, no save id)."""
    atomic_file.write_file(path, _npz_writer(arrays))


def read_npz(path: str, program: Optional[Program] = None, what: str = "checkpoint file") -> Dict[str, np.ndarray]:
    """{name: array} from an ``.npz`` archive; typed errors name the file and the entry.

    With ``program``, every entry that names one of its variables must fit
    that variable's shape and dtype, checked before any data is read (what
    ``refimpl run --params`` needs).
    """
    with npz_archive.NpzReader(path, what) as r:
        if program is not None:
            known = {v.name: v for v in program.list_vars()}
            _check({n: known[n] for n in r.headers if n in known}, r.headers, path)
        return r.read()


def _json_writer(doc: Any) -> Writer:
    return lambda f: f.write(json.dumps(doc, sort_keys=True).encode("utf-8"))


def read_json(path: str, what: str = "model file") -> Any:
    if not os.path.isfile(path):
        raise NotFound(f"{what} {path!r} does not exist")
    try:
        with open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise InvalidArgument(f"{what} {path!r} is truncated or corrupted ({e})") from None
    except RecursionError:
        raise InvalidArgument(f"{what} {path!r} nests its JSON values too deeply") from None


# ---- which variables ----------------------------------------------------------
def _programs(program):
    """The Programs behind ``program`` (a Program, a CompiledProgram or a pipeline Plan)."""
    if program is None:
        program = default_main_program()
    if isinstance(program, Program):
        return [program]
    if isinstance(getattr(program, "_program", None), Program):
        return [program._program]
    if hasattr(program, "job_types") and hasattr(program, "program"):
        return [program.program(t) for t in program.job_types()]
    raise InvalidArgument(f"expected a Program, CompiledProgram or Plan, got {type(program).__name__}")


def _saved_vars(programs, which):
    """{name: Variable}: 'params', 'opt' (other persistables) or 'all' persistables."""
    out = {}
    for p in programs:
        for v in p.list_vars():
            if not v.persistable or v.type in _NOT_SAVED or v.is_data:
                continue
            if which == "all" or (which == "params") == bool(v.is_parameter):
                out.setdefault(v.name, v)
    return dict(sorted(out.items()))


def _scheduler(programs):
    for p in programs:
        s = getattr(p, "lr_scheduler", None)
        if s is not None:
            return s
    return None


def _gather(variables, scope, programs=()):
    """{name: array} of ``variables``; with ``programs``, also the LR scheduler and random states."""
    arrays = {}
    for name in variables:
        holder = scope.find_var(name)
        t = holder.get_tensor() if holder is not None else None
        if t is None or not t._is_initialized():
            raise NotFound(f"cannot save persistable variable {name!r}: the scope holds no value "
                           f"(did you run the startup program?)")
        arrays[name] = np.array(t)
    if programs:
        sched = _scheduler(programs)
        if sched is not None:
            for k, v in flatten_state(sched.state_dict()).items():
                # None (ReduceOnPlateau's best before its first step) is stored as NaN
                arrays[LR_PREFIX + k] = np.asarray(np.nan if v is None else v)
        for k, v in random.get_state().items():
            arrays[RANDOM_PREFIX + k] = v
    return arrays


# ---- checking before anything is written -------------------------------------------------------
def _check(variables, headers, path):
    """Every variable present in ``headers`` ({name: (shape, dtype, _)}) with a fitting shape and dtype."""
    for name, var in variables.items():
        if name not in headers:
            raise NotFound(f"variable {name!r} is not in checkpoint file {path!r}")
        shape_got, dtype_got = headers[name][0], headers[name][1]
        shape = var.shape
        if shape is not None and (len(shape_got) != len(shape)
                                  or any(d >= 0 and d != s for d, s in zip(shape, shape_got))):
            raise InvalidArgument(f"variable {name!r} in {path!r} has shape {list(shape_got)}, "
                                  f"the program declares {list(shape)}")
        if var.dtype is not None and var.dtype != "bfloat16" and np.dtype(var.dtype) != dtype_got:
            raise InvalidArgument(f"variable {name!r} in {path!r} has dtype {dtype_got}, "
                                  f"the program declares {var.dtype}")


def _scheduler_state(sched, arrays, path):
    """The scheduler's state from the ``@LR_SCHEDULER@`` entries of ``arrays``, each checked; None if none."""
    if sched is None or not any(n.startswith(LR_PREFIX) for n in arrays):
        return None
    state = {}
    for key, current in flatten_state(sched.state_dict()).items():
        name = LR_PREFIX + key
        if name not in arrays:
            raise NotFound(f"LR scheduler entry {name!r} is not in checkpoint file {path!r}")
        a = arrays[name]
        integer = isinstance(current, (int, np.integer)) and not isinstance(current, bool)
        if a.size != 1 or a.dtype.kind not in ("iu" if integer else "iuf"):
            raise InvalidArgument(f"LR scheduler entry {name!r} in {path!r} must be one "
                                  f"{'integer' if integer else 'number'}, got dtype {a.dtype} shape {list(a.shape)}")
        value = a.item()
        if a.dtype.kind == "f" and np.isnan(value) and not integer:
            state[key] = None
        else:
            state[key] = type(current)(value) if isinstance(current, (int, float)) else value
    return unflatten_state(state)


def _random_state(arrays, path):
    entries = {n[len(RANDOM_PREFIX):]: a for n, a in arrays.items() if n.startswith(RANDOM_PREFIX)}
    return random.check_state(entries, f"checkpoint file {path!r}", RANDOM_PREFIX) if entries else None


def _state_names(headers):
    return [n for n in headers if n.startswith((LR_PREFIX, RANDOM_PREFIX))]


def _apply(values, scope, sched=None, sched_state=None, random_state=None):
    """Write checked arrays into ``scope``; restore the LR scheduler and the random state."""
    for name, a in values.items():
        scope.var(name).get_tensor().set(a if a.flags.c_contiguous else np.ascontiguousarray(a))
    if sched_state is not None:
        sched.set_state_dict(sched_state)
    if random_state is not None:
        random.set_state(random_state)


def _read_checked(readers, sched, whole):
    """Check then read ``[(reader, variables, with_state)]``; (values, scheduler state, random state)."""
    for r, variables, _ in readers:
        _check(variables, r.headers, r.path)
    values, sched_state, random_state = {}, None, None
    for r, variables, with_state in readers:
        arrays = r.read(list(variables) + (_state_names(r.headers) if with_state else []))
        if with_state:
            sched_state = _scheduler_state(sched, arrays, r.path)
            random_state = _random_state(arrays, r.path) if whole else None
        values.update((n, arrays[n]) for n in variables)
    return values, sched_state, random_state


# ---- paddle.static.save / load ---------------------------------------------------
def _prefix(model_path):
    for suffix in (".pdparams", ".pdopt", ".pdmodel"):
        if model_path.endswith(suffix):
            return model_path[:-len(suffix)]
    return model_path


def save(program: Program, model_path: str, protocol: int = 4, scope: Optional[Scope] = None,
         **configs: Any) -> None:
    """Parameters to ``.pdparams``, other persistables and states to ``.pdopt``, the program to ``.pdmodel``."""
    if not isinstance(model_path, str) or not os.path.basename(model_path):
        raise InvalidArgument(f"model_path must be of the form dirname/filename, got {model_path!r}")
    programs = _programs(program)
    scope = scope if scope is not None else global_scope()
    params = _gather(_saved_vars(programs, "params"), scope)
    opt = _gather(_saved_vars(programs, "opt"), scope, programs)
    doc = programs[0].to_dict()
    atomic_file.write_set(model_path, {".pdparams": lambda sid: _npz_writer(params, sid),
                             ".pdopt": lambda sid: _npz_writer(opt, sid),
                             ".pdmodel": lambda sid: _json_writer(doc)})


def load(program: Program, model_path: str, executor: Optional[Executor] = None,
         var_list: Optional[Sequence[Variable]] = None, scope: Optional[Scope] = None) -> None:
    """Read what :func:`save` wrote into ``scope``; everything is checked before anything is set."""
    prefix = _prefix(model_path)
    programs = _programs(program)
    scope = scope if scope is not None else global_scope()
    sched, whole = _scheduler(programs), var_list is None
    wanted = None if var_list is None else {getattr(v, "name", v) for v in var_list}
    with contextlib.ExitStack() as stack:
        readers = []
        for suffix, which in ((".pdparams", "params"), (".pdopt", "opt")):
            variables = _saved_vars(programs, which)
            if wanted is not None:
                variables = {n: v for n, v in variables.items() if n in wanted}
            path = prefix + suffix
            # the .pdopt also holds the scheduler's and the generator's states (see _read_checked)
            with_state = which == "opt" and (sched is not None or (whole and os.path.isfile(path)))
            if variables or with_state:
                readers.append((stack.enter_context(npz_archive.NpzReader(path)), variables, with_state))
        atomic_file.check_set(prefix, {r.path: r.save_id for r, _, _ in readers})
        values, sched_state, random_state = _read_checked(readers, sched, whole)
    _apply(values, scope, sched, sched_state, random_state)


# ---- save_persistables / load_persistables ---------------------------------------
def _archive(dirname, filename):
    if not isinstance(dirname, str) or not dirname:
        raise InvalidArgument(f"dirname must be a non-empty path, got {dirname!r}")
    return os.path.join(dirname, filename or DEFAULT_PERSISTABLES)


def save_persistables(executor: Optional[Executor], dirname: str, main_program: Optional[Program] = None,
                      filename: Optional[str] = None, scope: Optional[Scope] = None) -> None:
    """Every persistable variable of ``main_program`` (and the LR scheduler and random states) to one archive."""
    programs = _programs(main_program)
    scope = scope if scope is not None else global_scope()
    write_npz(_archive(dirname, filename), _gather(_saved_vars(programs, "all"), scope, programs))


def load_persistables(executor: Optional[Executor], dirname: str, main_program: Optional[Program] = None,
                      filename: Optional[str] = None, scope: Optional[Scope] = None) -> None:
    """Read what :func:`save_persistables` wrote; all or nothing."""
    programs = _programs(main_program)
    scope = scope if scope is not None else global_scope()
    sched = _scheduler(programs)
    with npz_archive.NpzReader(_archive(dirname, filename)) as r:
        values, sched_state, random_state = _read_checked([(r, _saved_vars(programs, "all"), True)], sched, True)
    _apply(values, scope, sched, sched_state, random_state)


# ---- inference models ---------------------------------------------------------------
def _prune_for_inference(program, feed_names, fetch_names):
    """A for-test clone keeping only the ops the fetches need (walking back from them)."""
    p = program.clone(for_test=True)
    block = p.global_block()
    needed, keep = set(fetch_names), []
    for op in reversed(block.ops):
        if needed & set(op.output_arg_names):
            keep.append(op)
            needed.update(n for n in op.input_arg_names if n not in feed_names)
    block.ops = keep[::-1]
    used = {n for op in block.ops for n in op.input_arg_names + op.output_arg_names}
    block.vars = {k: v for k, v in block.vars.items() if k in used or k in feed_names}
    p._bump()
    return p


def save_inference_model(path_prefix: str, feed_vars: Union[Variable, Sequence[Variable]],
                         fetch_vars: Union[Variable, Sequence[Variable]], executor: Optional[Executor],
                         program: Optional[Program] = None, scope: Optional[Scope] = None,
                         **kwargs: Any) -> None:
    """The pruned program to ``path_prefix.pdmodel`` (JSON), its persistables to ``.pdiparams``."""
    if not isinstance(path_prefix, str) or not os.path.basename(path_prefix):
        raise InvalidArgument(f"path_prefix must be of the form dirname/filename, got {path_prefix!r}")
    feed_list: List[Any] = list(feed_vars) if isinstance(feed_vars, (list, tuple)) else [feed_vars]
    fetch_list: List[Any] = list(fetch_vars) if isinstance(fetch_vars, (list, tuple)) else [fetch_vars]
    feeds = [getattr(v, "name", v) for v in feed_list]
    fetches = [getattr(v, "name", v) for v in fetch_list]
    program = program if program is not None else default_main_program()
    for n in feeds + fetches:
        if program.global_block()._find_var_recursive(n) is None:
            raise NotFound(f"save_inference_model: {n!r} is not a variable of the program")
    pruned = _prune_for_inference(program, set(feeds), fetches)
    scope = scope if scope is not None else global_scope()
    params = _gather(_saved_vars([pruned], "all"), scope)
    doc = {"format": INFERENCE_FORMAT, "feed": feeds, "fetch": fetches, "program": pruned.to_dict()}
    atomic_file.write_set(path_prefix, {".pdmodel": lambda sid: _json_writer(dict(doc, save_id=sid)),
                              ".pdiparams": lambda sid: _npz_writer(params, sid)})


def load_inference_model(path_prefix: str, executor: Optional[Executor], scope: Optional[Scope] = None,
                         **kwargs: Any) -> List[Any]:
    """``[program, feed_target_names, fetch_targets]``; the parameters go into ``scope``."""
    path = path_prefix + ".pdmodel"
    doc = read_json(path)
    if not isinstance(doc, dict) or doc.get("format") != INFERENCE_FORMAT:
        raise InvalidArgument(f"model file {path!r} is not an {INFERENCE_FORMAT} document")
    feeds: Any = doc.get("feed")
    fetches: Any = doc.get("fetch")
    for key, names in (("feed", feeds), ("fetch", fetches)):
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise InvalidArgument(f"model file {path!r}: {key!r} must be a list of variable names")
    try:
        program = Program.from_dict(doc.get("program"))
    except EnforceNotMet as e:
        raise type(e)(f"model file {path!r}: {e.args[0]}") from None
    block = program.global_block()
    for n in feeds + fetches:
        if block._find_var_recursive(n) is None:
            raise NotFound(f"model file {path!r}: {n!r} is not a variable of its program")
    variables = _saved_vars([program], "all")
    with npz_archive.NpzReader(path_prefix + ".pdiparams") as r:
        model_id = doc.get("save_id") if isinstance(doc.get("save_id"), str) else None
        atomic_file.check_set(path_prefix, {path: model_id, r.path: r.save_id})
        values, _, _ = _read_checked([(r, variables, False)], None, False)
    _apply(values, scope if scope is not None else global_scope())
    return [program, feeds, [block._find_var_recursive(n) for n in fetches]]

from refimpl.framework import namespace_getattr as _namespace_getattr  # noqa: E402
__getattr__ = _namespace_getattr(__name__)  # a Paddle name refimpl lacks: Unimplemented, naming it

# paddle.static.io's names implemented in io_vars.py / io_serialize.py; last, as they import from this module
from .io_vars import (get_program_persistable_vars, is_parameter, is_persistable, load_program_state,  # noqa: E402,F401
                      load_vars, save_vars, set_program_state)
from .io_serialize import (deserialize_persistables, deserialize_program, load_from_file,  # noqa: E402,F401
                           normalize_program, save_to_file, serialize_persistables, serialize_program)
