"""Checkpoints: ``paddle.static.save``/``load``, ``save_persistables``/``load_persistables``,
``save_inference_model``/``load_inference_model``.

Mirrors ``paddle/static/io.py``: ``save(program, path)`` writes the
parameters to ``path.pdparams``, the other persistables (optimizer
accumulators, beta pows, learning rate, gradient-merge buffers and counters)
to ``path.pdopt`` and the program to ``path.pdmodel``; ``load`` reads them
back into the scope, naming any variable the file lacks. Differences from
Paddle:

* **No pickle.** Tensor files are NumPy ``.npz`` archives (one ``.npy`` per
  variable, written here, read with ``np.load(allow_pickle=False)``); the
  program is ``program/v1`` JSON (``Program.to_dict``), not a protobuf.
* **Atomic.** Every file goes to a temporary file in the same directory,
  is fsynced and then ``os.replace``-d over the old one, so a crash while
  writing leaves the previous checkpoint file intact. ``save`` writes all
  its temporaries before renaming any, which narrows (but cannot close) the
  window in which ``.pdparams`` and ``.pdopt`` come from different saves.
* **Checked, all or nothing.** A truncated or corrupted file raises
  ``InvalidArgument`` naming the file; a missing file or variable raises
  ``NotFound`` naming both; a shape or dtype that does not fit the program
  raises ``InvalidArgument``. Everything is checked before the first
  variable is written, so a failed load leaves the scope untouched.
* **LR scheduler.** When the program carries an ``LRScheduler``
  (``program.lr_scheduler``), its ``state_dict()`` is stored in the
  optimizer file under ``@LR_SCHEDULER@.<key>`` and restored with
  ``set_state_dict`` (Paddle saves it separately, with ``paddle.save``).
* ``scope=`` (default ``global_scope()``) says where the variables live;
  ``main_program`` may also be a ``CompiledProgram`` or a pipeline ``Plan``
  (all of its job programs). ``save_persistables`` always writes one archive
  (``filename`` or ``__persistables__.npz``), never one file per variable.
"""
from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Callable, Dict, IO, List, Optional, Sequence, TYPE_CHECKING, Union
import zipfile

import numpy as np

from refimpl.core.errors import EnforceNotMet, InvalidArgument, NotFound
from refimpl.core.scope import global_scope
from refimpl.framework.program import Program, default_main_program

if TYPE_CHECKING:
    from refimpl.core.scope import Scope
    from refimpl.executor.executor import Executor
    from refimpl.framework.variable import Variable

LR_PREFIX = "@LR_SCHEDULER@."
DEFAULT_PERSISTABLES = "__persistables__.npz"
INFERENCE_FORMAT = "inference/v1"
_NOT_SAVED = ("FEED_MINIBATCH", "FETCH_LIST", "READER", "RAW", "STEP_SCOPES")


# ---- files ------------------------------------------------------------------
def _temp_write(path, write):
    """Write ``path``'s new content to a fsynced temporary file beside it; return its name."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def _commit(pairs):
    """Rename every (temporary, final) pair into place, then fsync the directories."""
    for tmp, path in pairs:
        os.replace(tmp, path)
    for d in {os.path.dirname(os.path.abspath(p)) for _, p in pairs}:
        try:
            fd = os.open(d, os.O_RDONLY)
        except OSError:  # e.g. platforms without directory fds
            continue
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)


def atomic_write_files(contents: Dict[str, Callable[[IO[bytes]], Any]]) -> None:
    """Write {path: writer(fileobj)} so that each file is either old or new, never partial."""
    pairs = []
    try:
        for path, write in contents.items():
            pairs.append((_temp_write(path, write), path))
    except BaseException:
        for tmp, _ in pairs:
            os.unlink(tmp)
        raise
    _commit(pairs)


def _npz_writer(arrays):
    def write(f):
        with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
            for name, arr in arrays.items():
                arr = np.asarray(arr)
                if arr.dtype.hasobject:
                    raise InvalidArgument(f"cannot save {name!r}: object arrays are not supported")
                with z.open(name + ".npy", "w", force_zip64=True) as entry:
                    np.lib.format.write_array(entry, arr, allow_pickle=False)
    return write


def write_npz(path: str, arrays: Dict[str, np.ndarray]) -> None:
    """Write {name: array} to ``path`` atomically (a ``.npz`` archive)."""
    atomic_write_files({path: _npz_writer(arrays)})


def read_npz(path: str) -> Dict[str, np.ndarray]:
    """{name: array} from an archive written by :func:`write_npz`; typed errors name the file."""
    if not os.path.isfile(path):
        raise NotFound(f"checkpoint file {path!r} does not exist")
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, ValueError, EOFError, OSError, KeyError, zipfile.LargeZipFile) as e:
        raise InvalidArgument(f"checkpoint file {path!r} is truncated or corrupted "
                              f"({type(e).__name__}: {e})") from None


def _json_writer(doc):
    return lambda f: f.write(json.dumps(doc, sort_keys=True).encode("utf-8"))


def read_json(path: str) -> Any:
    if not os.path.isfile(path):
        raise NotFound(f"model file {path!r} does not exist")
    try:
        with open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise InvalidArgument(f"model file {path!r} is truncated or corrupted ({e})") from None


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
    arrays = {}
    for name in variables:
        holder = scope.find_var(name)
        t = holder.get_tensor() if holder is not None else None
        if t is None or not t._is_initialized():
            raise NotFound(f"cannot save persistable variable {name!r}: the scope holds no value "
                           f"(did you run the startup program?)")
        arrays[name] = np.array(t)
    sched = _scheduler(programs)
    if sched is not None:
        for k, v in sched.state_dict().items():
            arrays[LR_PREFIX + k] = np.asarray(v)
    return arrays


def _check(variables, arrays, path):
    """Every variable present in ``arrays`` with a fitting shape and dtype, or a typed error."""
    for name, var in variables.items():
        if name not in arrays:
            raise NotFound(f"variable {name!r} is not in checkpoint file {path!r}")
        a = arrays[name]
        shape = var.shape
        if shape is not None and (a.ndim != len(shape) or any(d >= 0 and d != s for d, s in zip(shape, a.shape))):
            raise InvalidArgument(f"variable {name!r} in {path!r} has shape {list(a.shape)}, "
                                  f"the program declares {list(shape)}")
        if var.dtype is not None and var.dtype != "bfloat16" and np.dtype(var.dtype) != a.dtype:
            raise InvalidArgument(f"variable {name!r} in {path!r} has dtype {a.dtype}, "
                                  f"the program declares {var.dtype}")


def _apply(loaded, scope, programs):
    """Write checked arrays into ``scope``; restore the LR scheduler."""
    state = {}
    for name, a in loaded.items():
        if name.startswith(LR_PREFIX):
            state[name[len(LR_PREFIX):]] = a.item()
        else:
            scope.var(name).get_tensor().set(np.array(a))
    sched = _scheduler(programs)
    if sched is not None and state:
        sched.set_state_dict(state)


def _pick(variables, arrays):
    out = {n: arrays[n] for n in variables}
    out.update({k: v for k, v in arrays.items() if k.startswith(LR_PREFIX)})
    return out


# ---- paddle.static.save / load ---------------------------------------------------
def _prefix(model_path):
    for suffix in (".pdparams", ".pdopt", ".pdmodel"):
        if model_path.endswith(suffix):
            return model_path[:-len(suffix)]
    return model_path


def save(program: Program, model_path: str, protocol: int = 4, scope: Optional[Scope] = None,
         **configs: Any) -> None:
    """Parameters to ``.pdparams``, other persistables to ``.pdopt``, the program to ``.pdmodel``."""
    if not isinstance(model_path, str) or not os.path.basename(model_path):
        raise InvalidArgument(f"model_path must be of the form dirname/filename, got {model_path!r}")
    programs = _programs(program)
    scope = scope if scope is not None else global_scope()
    params = _gather(_saved_vars(programs, "params"), scope)
    opt = _gather(_saved_vars(programs, "opt"), scope, programs)
    atomic_write_files({model_path + ".pdparams": _npz_writer(params),
                        model_path + ".pdopt": _npz_writer(opt),
                        model_path + ".pdmodel": _json_writer(programs[0].to_dict())})


def load(program: Program, model_path: str, executor: Optional[Executor] = None,
         var_list: Optional[Sequence[Variable]] = None, scope: Optional[Scope] = None) -> None:
    """Read what :func:`save` wrote into ``scope``; all variables are checked before any is set."""
    prefix = _prefix(model_path)
    programs = _programs(program)
    scope = scope if scope is not None else global_scope()
    loaded = {}
    for suffix, which in ((".pdparams", "params"), (".pdopt", "opt")):
        variables = _saved_vars(programs, which)
        if var_list is not None:
            wanted = {getattr(v, "name", v) for v in var_list}
            variables = {n: v for n, v in variables.items() if n in wanted}
        if not variables and not (which == "opt" and _scheduler(programs)):
            continue
        path = prefix + suffix
        arrays = read_npz(path)
        _check(variables, arrays, path)
        loaded.update(_pick(variables, arrays))
    _apply(loaded, scope, programs)


# ---- save_persistables / load_persistables ---------------------------------------
def _archive(dirname, filename):
    if not isinstance(dirname, str) or not dirname:
        raise InvalidArgument(f"dirname must be a non-empty path, got {dirname!r}")
    return os.path.join(dirname, filename or DEFAULT_PERSISTABLES)


def save_persistables(executor: Optional[Executor], dirname: str, main_program: Optional[Program] = None,
                      filename: Optional[str] = None, scope: Optional[Scope] = None) -> None:
    """Every persistable variable of ``main_program`` (and the LR scheduler state) to one archive."""
    programs = _programs(main_program)
    scope = scope if scope is not None else global_scope()
    write_npz(_archive(dirname, filename), _gather(_saved_vars(programs, "all"), scope, programs))


def load_persistables(executor: Optional[Executor], dirname: str, main_program: Optional[Program] = None,
                      filename: Optional[str] = None, scope: Optional[Scope] = None) -> None:
    """Read what :func:`save_persistables` wrote; all or nothing."""
    programs = _programs(main_program)
    scope = scope if scope is not None else global_scope()
    path = _archive(dirname, filename)
    arrays = read_npz(path)
    variables = _saved_vars(programs, "all")
    _check(variables, arrays, path)
    _apply(_pick(variables, arrays), scope, programs)


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
    atomic_write_files({path_prefix + ".pdmodel": _json_writer(doc),
                        path_prefix + ".pdiparams": _npz_writer(params)})


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
    params_path = path_prefix + ".pdiparams"
    arrays = read_npz(params_path)
    variables = _saved_vars([program], "all")
    _check(variables, arrays, params_path)
    _apply(_pick(variables, arrays), scope if scope is not None else global_scope(), [program])
    return [program, feeds, [block._find_var_recursive(n) for n in fetches]]
