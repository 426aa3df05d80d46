"""Saving chosen variables, and a program's state as a dict: ``save_vars`` / ``load_vars``,
``load_program_state`` / ``set_program_state``, ``is_persistable`` / ``is_parameter``.

Mirrors ``python/paddle/static/io.py`` (``save_vars``, ``load_vars``,
``load_program_state``, ``set_program_state``, ``get_program_persistable_vars``)
and ``python/paddle/framework/io_utils.py`` (``is_persistable``,
``is_parameter``). Paddle builds a small program of ``save`` / ``save_combine``
(``load`` / ``load_combine``) ops and runs it; here the files are written and
read directly. Differences from Paddle:

* **Formats.** Every file is a NumPy ``.npz`` archive (``refimpl.core.npz_archive``),
  never Paddle's tensor stream. The layout is Paddle's: with ``filename=None``
  one file per variable, ``<dirname>/<variable name>`` (no suffix), an archive
  holding the one entry of that name; with ``filename`` one archive
  ``<dirname>/<filename>`` holding every variable; with ``dirname`` and
  ``filename`` both None, ``save_vars`` returns the archive's bytes (and
  ``load_vars(dirname=None, filename=<bytes>)`` reads them). Each file is
  written atomically (``refimpl.core.atomic_file``).
* **Checked before anything is set.** ``load_vars`` and ``set_program_state``
  check every variable (present, shape, dtype) before writing the first one
  into the scope; Paddle checks parameter shapes after loading. Errors are
  typed (``NotFound``, ``InvalidArgument``) and name the API, the variable
  and the file.
* ``load_program_state`` reads what ``static.save`` writes (``.pdparams`` and
  ``.pdopt`` archives, without refimpl's ``@LR_SCHEDULER@`` / ``@RANDOM_STATE@``
  entries, which Paddle's files do not have) and what ``save_vars`` and
  ``save_persistables`` write (a directory or one file). In a directory,
  an archive whose entries are not the one variable its path names (the
  ``__persistables__.npz`` of ``save_persistables``) gives all its entries.
"""
from __future__ import annotations

import io as _pyio
import os
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np

from refimpl.core import atomic_file, npz_archive
from refimpl.core.errors import EnforceNotMet, InvalidArgument, NotFound
from refimpl.core.scope import global_scope
from refimpl.framework.io import BytesArchive
from refimpl.framework.program import Program, default_main_program
from refimpl.framework.variable import Parameter, Variable

from . import io as _io

__all__ = ["save_vars", "load_vars", "load_program_state", "set_program_state", "is_persistable",
           "is_parameter"]

_NOT_PERSISTABLE_TYPES = ("FEED_MINIBATCH", "FETCH_LIST", "READER")


def is_persistable(var: Variable) -> bool:
    """Paddle's ``is_persistable``: persistable, and not a feed / fetch / reader holder."""
    if var.type in _NOT_PERSISTABLE_TYPES:
        return False
    return bool(var.persistable)


def is_parameter(var: Variable) -> bool:
    """Paddle's ``is_parameter``: the variable is a :class:`Parameter`."""
    return isinstance(var, Parameter)


def get_program_persistable_vars(program: Program) -> List[Variable]:
    """Paddle's ``paddle.static.io.get_program_persistable_vars``: every persistable variable of ``program``."""
    return [v for v in _program(program, "get_program_persistable_vars").list_vars() if is_persistable(v)]


def _program(program: Any, api: str) -> Program:
    if program is None:
        return default_main_program()
    if isinstance(getattr(program, "_program", None), Program):  # a CompiledProgram
        return program._program
    if not isinstance(program, Program):
        raise InvalidArgument(f"{api}: the type of input main_program is invalid, expected type is "
                              f"base.Program, but received {type(program)}")
    return program


def _chosen(api: str, program: Any, vars: Optional[Sequence[Variable]],
            predicate: Optional[Callable[[Variable], bool]]) -> List[Variable]:
    """``vars`` if given, else the variables of the program that satisfy ``predicate``; RAW ones left out."""
    if vars is None:
        candidates = list(_program(program, api).list_vars())
        vars = [v for v in candidates if predicate(v)] if predicate is not None else candidates
    else:
        _program(program, api)  # the type check Paddle makes even when vars are given
    out = []
    for v in vars:
        if not isinstance(v, Variable):
            raise InvalidArgument(f"{api}: vars must hold Variables, got {type(v).__name__}")
        if v.type != "RAW":
            out.append(v)
    return out


def _values(api: str, variables: Sequence[Variable]) -> Dict[str, np.ndarray]:
    arrays = {}
    scope = global_scope()
    for v in variables:
        holder = scope.find_var(v.name)
        t = holder.get_tensor() if holder is not None else None
        if t is None or not t._is_initialized():
            raise NotFound(f"{api}: variable {v.name!r} holds no value in the global scope "
                           f"(did you run the startup program?)")
        arrays[v.name] = np.array(t)
    return arrays


def save_vars(executor: Any, dirname: Optional[str], main_program: Optional[Program] = None,
              vars: Optional[Sequence[Variable]] = None, predicate: Optional[Callable[[Variable], bool]] = None,
              filename: Optional[str] = None) -> Optional[bytes]:
    """Save ``vars`` (or the program's variables satisfying ``predicate``) from the global scope.

    One archive per variable under ``dirname``, or one archive
    ``dirname/filename``; with neither, the archive's bytes are returned.
    """
    variables = _chosen("save_vars", main_program, vars, predicate)
    if not variables:
        warnings.warn("no variable in your model, please ensure there are any variables in your model to save")
        return None
    arrays = _values("save_vars", variables)
    if dirname is None and filename is None:
        buf = _pyio.BytesIO()
        npz_archive.write(buf, dict(sorted(arrays.items())))
        return buf.getvalue()
    if not isinstance(dirname, str) or not dirname:
        raise InvalidArgument(f"save_vars: dirname must be a directory path, got {dirname!r}")
    dirname = os.path.normpath(dirname)
    if filename is not None:
        if not isinstance(filename, str) or not filename:
            raise InvalidArgument(f"save_vars: filename must be a file name or None, got {filename!r}")
        files = {os.path.join(dirname, filename): dict(sorted(arrays.items()))}
    else:
        files = {os.path.join(dirname, name): {name: a} for name, a in arrays.items()}
    for path in files:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    atomic_file.write_files({p: _io._npz_writer(a) for p, a in files.items()})
    return None


def _read_archives(api: str, sources: Dict[Any, List[Variable]]) -> Dict[str, np.ndarray]:
    """{name: array} for ``{path or bytes: variables}``, every entry checked against its variable first."""
    readers: List[Any] = []
    try:
        for src, variables in sources.items():
            if isinstance(src, bytes):
                readers.append((BytesArchive(src, f"{api} bytes"), variables))
            else:
                readers.append((npz_archive.NpzReader(src, f"{api} file"), variables))
        for r, variables in readers:
            _io._check({v.name: v for v in variables}, r.headers, r.path)
        out = {}
        for r, variables in readers:
            out.update(r.read([v.name for v in variables]))
        return out
    finally:
        for r, _ in readers:
            r.close()


def load_vars(executor: Any, dirname: Optional[str], main_program: Optional[Program] = None,
              vars: Optional[Sequence[Variable]] = None, predicate: Optional[Callable[[Variable], bool]] = None,
              filename: Union[str, bytes, None] = None) -> None:
    """Read what :func:`save_vars` wrote into the global scope; all or nothing."""
    variables = _chosen("load_vars", main_program, vars, predicate)
    if filename == "":
        filename = None
    if dirname is None:
        if not isinstance(filename, bytes):
            raise InvalidArgument("load_vars: the directory path and params cannot be None at the same time "
                                  "(with dirname=None, filename must be the bytes save_vars returned)")
        sources: Dict[Any, List[Variable]] = {filename: variables}
    else:
        dirname = os.path.normpath(dirname)
        if filename is not None:
            sources = {os.path.join(dirname, str(filename)): variables}
        else:
            sources = {os.path.join(dirname, v.name): [v] for v in variables}
    values = _read_archives("load_vars", sources)
    scope = global_scope()
    for name, a in values.items():
        scope.var(name).get_tensor().set(a)


# ---- program state -------------------------------------------------------------------
def _prefix(model_path: str) -> str:
    for suffix in (".pdparams", ".pdopt", ".pdmodel"):
        if model_path.endswith(suffix):
            return model_path[:-len(suffix)]
    return model_path


def _read_plain(path: str, what: str) -> Dict[str, np.ndarray]:
    arrays = npz_archive.read(path, what)
    return {n: a for n, a in arrays.items() if not n.startswith((_io.LR_PREFIX, _io.RANDOM_PREFIX))}


def _state_from_directory(model_path: str) -> Dict[str, np.ndarray]:
    """Every variable of a directory written by ``save_vars`` / ``save_persistables``."""
    state: Dict[str, np.ndarray] = {}
    for root, _dirs, files in sorted(os.walk(model_path, topdown=False)):
        for f in sorted(files):
            path = os.path.join(root, f)
            name = os.path.relpath(path, model_path).replace("\\", "/")
            try:
                arrays = _read_plain(path, "load_program_state file")
            except EnforceNotMet as e:
                warnings.warn(f"Failed to load model/variables `{name}`, please make sure model/variables file "
                              f"is saved with the following APIs: save_params, save_persistables, save_vars. "
                              f"({e})", RuntimeWarning)
                continue
            state.update(arrays)
    return state


def load_program_state(model_path: str, var_list: Optional[Sequence[Variable]] = None) -> Dict[str, np.ndarray]:
    """{name: ndarray} from what ``static.save`` (a path prefix) or ``save_vars`` (a directory or file) wrote."""
    if not isinstance(model_path, str) or not model_path:
        raise InvalidArgument(f"load_program_state: model_path must be a path, got {model_path!r}")
    prefix = _prefix(model_path)
    params = prefix + ".pdparams"
    if os.path.exists(params):
        state = _read_plain(params, "load_program_state file")
        if os.path.exists(prefix + ".pdopt"):
            state.update(_read_plain(prefix + ".pdopt", "load_program_state file"))
        return state
    if not os.path.exists(model_path):
        raise NotFound(f"load_program_state: neither {params!r} (static.save) nor {model_path!r} "
                       f"(save_vars / save_persistables) exists")
    if os.path.isfile(model_path):
        if var_list is None:
            raise InvalidArgument(f"load_program_state: var_list can not be None when model_path is a file "
                                  f"type ({model_path!r})")
        return _read_archives("load_program_state", {model_path: list(var_list)})
    if var_list is not None:
        return _read_archives("load_program_state",
                              {os.path.join(model_path, v.name): [v] for v in var_list})
    return _state_from_directory(model_path)


def set_program_state(program: Program, state_dict: Dict[str, Any]) -> None:
    """Write ``state_dict``'s arrays into the global scope's tensors of ``program``'s persistables.

    Every persistable must already hold a value (run the startup program
    first); shapes and dtypes must match; names the program lacks are warned about.
    """
    program = _program(program, "set_program_state")
    if not isinstance(state_dict, dict):
        raise InvalidArgument(f"set_program_state: state_dict must be a dict, got {type(state_dict).__name__}")
    scope, updates = global_scope(), []
    for para in get_program_persistable_vars(program):
        holder = scope.find_var(para.name)
        if holder is None or not holder.get_tensor()._is_initialized():
            raise NotFound(f"set_program_state: Variable [ {para.name} ] Not found, Please make sure run "
                           f"startup program")
        if para.name not in state_dict:
            continue
        old, new = np.asarray(holder.get_tensor()), np.asarray(state_dict[para.name])
        if old.shape != new.shape:
            raise InvalidArgument(f"set_program_state: Parameter's shape does not match, the Program requires "
                                  f"a parameter with the shape of ({old.shape}), while the loaded parameter "
                                  f"(namely [ {para.name} ]) has a shape of  ({new.shape}).")
        if old.dtype != new.dtype:
            raise InvalidArgument(f"set_program_state: Parameter's data type does not match, the Program "
                                  f"requires a parameter with a dtype of ({old.dtype}), while the loaded "
                                  f"parameter (namely [ {para.name} ]) has a dtype of  ({new.dtype}).")
        updates.append((holder.get_tensor(), new))
    for t, new in updates:
        t.set(new)
    persistables = {p.name for p in get_program_persistable_vars(program)}
    unused = [k for k in state_dict if k not in persistables]
    if unused:
        warnings.warn("This list is not set, Because of Parameter not found in program. There are: "
                      + " ".join(unused))
