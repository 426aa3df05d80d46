"""Inference programs and parameters as bytes: ``normalize_program``, ``serialize_program`` /
``deserialize_program``, ``serialize_persistables`` / ``deserialize_persistables``,
``save_to_file`` / ``load_from_file``.

Mirrors ``python/paddle/static/io.py`` on the legacy IR. ``normalize_program``
clones the program, drops its ``feed`` / ``fetch`` ops, prunes it to the ops
the fetches need from the feeds (unless ``skip_prune_program``), sets every
``is_test`` attr, then prepends a ``feed`` op per feed (each at the front, so
the last feed's op comes first, as in Paddle) and appends a ``fetch`` op per
fetch, with the ``feed`` / ``fetch`` holder variables. As Paddle does, it
clears the ``op_device`` attr of the ops of the program it is given.
Differences from Paddle:

* **Formats.** A serialized program is the ``program/v1`` JSON document of
  ``Program.to_dict`` (UTF-8), not a ``ProgramDesc`` protobuf; serialized
  persistables are a NumPy ``.npz`` archive (``refimpl.core.npz_archive``) of
  ``{name: array}`` sorted by name, not a ``save_combine`` tensor stream.
  Paddle's own bytes are not read.
* **Checked.** Bytes that are not such a document or archive raise
  ``InvalidArgument`` naming the API; ``deserialize_persistables`` checks
  every persistable of the program (present, shape, dtype) before setting
  any, and raises ``NotFound`` / ``InvalidArgument`` naming the variable
  (Paddle fails inside ``load_combine`` or after loading).
* ``read`` ops are not pruned (``prune_read_op``): refimpl's readers are not
  part of inference programs; ``legacy_format`` is accepted and changes nothing.
"""
from __future__ import annotations

import io as _pyio
import json
import os
import warnings
from typing import Any, List, Optional, Sequence, Union

from refimpl.core import atomic_file, npz_archive
from refimpl.core.errors import EnforceNotMet, InvalidArgument, NotFound
from refimpl.framework.io import BytesArchive
from refimpl.framework.program import Program, default_main_program
from refimpl.framework.variable import Variable

from . import io as _io
from .io_vars import _values, get_program_persistable_vars

__all__ = ["normalize_program", "serialize_program", "deserialize_program", "serialize_persistables",
           "deserialize_persistables", "save_to_file", "load_from_file"]

Vars = Union[Variable, Sequence[Variable]]


def _var_list(api: str, name: str, value: Any) -> List[Variable]:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not all(isinstance(v, Variable) for v in values):
        raise InvalidArgument(f"{api}: '{name}' should be a Variable or a list of Variable.")
    return values


def _valid_program(api: str, program: Any) -> Program:
    if program is None:
        return default_main_program()
    if isinstance(getattr(program, "_program", None), Program):  # a CompiledProgram
        warnings.warn("The input is a CompiledProgram, this is not recommended.")
        program = program._program
    if not isinstance(program, Program):
        raise InvalidArgument(f"{api}: the type of input program is invalid, expected type is base.Program, "
                              f"but received {type(program)}")
    return program


def _set_is_test(program: Program) -> None:
    """The ``is_test`` part of Paddle's ``Program._inference_optimize``."""
    for b in program.blocks:
        for op in b.ops:
            if op.has_attr("is_test"):
                op._set_attr("is_test", True)
            if op.type == "batch_norm":
                op.remove_output("ReserveSpace")


def _add_feed_fetch(program: Program, feed_names: Sequence[str], fetch_names: Sequence[str]) -> None:
    """Paddle's ``prepend_feed_ops`` and ``append_fetch_ops``."""
    block = program.global_block()
    if feed_names:
        holder = block.create_var(name="feed", type="FEED_MINIBATCH", persistable=True)
        for i, name in enumerate(feed_names):
            if not block.has_var(name):
                raise InvalidArgument(f"normalize_program: The feeded_var_names[{i}]: '{name}' doesn't exist in "
                                      f"pruned inference program. Please check whether '{name}' is a valid "
                                      f"feed_var name, or remove it from feeded_var_names if '{name}' is not "
                                      f"involved in the target_vars calculation.")
            block._prepend_op("feed", {"X": [holder]}, {"Out": [block.var(name)]}, {"col": i})
    holder = block.create_var(name="fetch", type="FETCH_LIST", persistable=True)
    for i, name in enumerate(fetch_names):
        block.append_op("fetch", {"X": [name]}, {"Out": [holder]}, {"col": i})


def normalize_program(program: Program, feed_vars: Vars, fetch_vars: Vars, **kwargs: Any) -> Program:
    """A copy of ``program`` ready for inference: pruned from ``feed_vars`` to ``fetch_vars``, with feed/fetch ops."""
    if not isinstance(program, Program):
        raise InvalidArgument(f"normalize_program: program type must be `base.Program`, but received "
                              f"`{type(program)}`")
    feeds = _var_list("normalize_program", "feed_vars", feed_vars)
    fetches = _var_list("normalize_program", "fetch_vars", fetch_vars)
    if not program.global_block().ops:
        raise InvalidArgument("normalize_program: program must not be empty. at least one operator is required!")
    for op in program.global_block().ops:
        if op.has_attr("op_device"):
            op._set_attr("op_device", "")
        if op.type == "auc":
            warnings.warn("Be sure that you have set auc states to 0 before saving inference model.")
            break
    feed_names, fetch_names = [v.name for v in feeds], [v.name for v in fetches]
    for n in fetch_names:
        if program.global_block()._find_var_recursive(n) is None:
            raise NotFound(f"normalize_program: fetch variable {n!r} is not a variable of the program")
    copy = program.clone()
    block = copy.global_block()
    block.ops = [op for op in block.ops if op.type not in ("feed", "fetch")]
    if kwargs.get("skip_prune_program", False):
        _set_is_test(copy)
    else:  # a for-test clone pruned to the fetches: Paddle's _prune_with_input + _inference_optimize
        copy = _io._prune_for_inference(copy, set(feed_names), fetch_names)
        used = {n for op in copy.global_block().ops for n in op.input_arg_names + op.output_arg_names}
        block = copy.global_block()  # a feed the fetches do not need is pruned too
        block.vars = {k: v for k, v in block.vars.items() if k in used or k not in feed_names}
    _add_feed_fetch(copy, feed_names, fetch_names)
    return copy


def serialize_program(feed_vars: Vars, fetch_vars: Vars, **kwargs: Any) -> bytes:
    """The normalized program (of ``kwargs['program']`` or the default main program) as ``program/v1`` JSON bytes."""
    _var_list("serialize_program", "feed_vars", feed_vars)
    _var_list("serialize_program", "fetch_vars", fetch_vars)
    program = _valid_program("serialize_program", kwargs.get("program"))
    program = normalize_program(program, feed_vars, fetch_vars)
    return json.dumps(program.to_dict(), sort_keys=True).encode("utf-8")


def deserialize_program(data: bytes) -> Program:
    """The Program that :func:`serialize_program` (or ``paddle.save(program)``) wrote as bytes."""
    if not isinstance(data, (bytes, bytearray)):
        raise InvalidArgument(f"deserialize_program: data must be bytes, got {type(data).__name__}")
    try:
        doc = json.loads(bytes(data).decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise InvalidArgument(f"deserialize_program: data is not a serialized refimpl program "
                              f"(program/v1 JSON): {e}") from None
    except RecursionError:
        raise InvalidArgument("deserialize_program: data nests its JSON values too deeply") from None
    try:
        return Program.from_dict(doc)
    except EnforceNotMet as e:
        raise type(e)(f"deserialize_program: {e.args[0]}") from None


def serialize_persistables(feed_vars: Vars, fetch_vars: Vars, executor: Any, **kwargs: Any) -> Optional[bytes]:
    """The global scope's values of the normalized program's persistables, as ``.npz`` bytes."""
    _var_list("serialize_persistables", "feed_vars", feed_vars)
    _var_list("serialize_persistables", "fetch_vars", fetch_vars)
    program = _valid_program("serialize_persistables", kwargs.get("program"))
    program = normalize_program(program, feed_vars, fetch_vars)
    variables = [v for v in get_program_persistable_vars(program) if v.type != "RAW"]
    if not variables:
        warnings.warn("no variable in your model, please ensure there are any variables in your model to save")
        return None
    arrays = _values("serialize_persistables", variables)
    buf = _pyio.BytesIO()
    npz_archive.write(buf, dict(sorted(arrays.items())))
    return buf.getvalue()


def deserialize_persistables(program: Program, data: Optional[bytes], executor: Any) -> None:
    """Set ``program``'s persistables in the global scope from :func:`serialize_persistables` bytes; all or nothing."""
    if not isinstance(program, Program):
        raise InvalidArgument(f"deserialize_persistables: program type must be `base.Program`, but received "
                              f"`{type(program)}`")
    variables = [v for v in get_program_persistable_vars(program) if v.type not in ("RAW", "SELECTED_ROWS")]
    if data is None:
        if any(v.is_parameter for v in variables):
            raise InvalidArgument("deserialize_persistables: Required 'data' shall be not None if program "
                                  "contains parameter, but received 'data' is None.")
        return None
    if not isinstance(data, (bytes, bytearray)):
        raise InvalidArgument(f"deserialize_persistables: data must be bytes, got {type(data).__name__}")
    try:
        archive = BytesArchive(bytes(data), "deserialize_persistables bytes")
    except EnforceNotMet as e:
        raise type(e)(f"deserialize_persistables: data is not a serialized refimpl persistables archive "
                      f"(.npz): {e.args[0]}") from None
    try:
        _io._check({v.name: v for v in variables}, archive.headers, archive.path)
        values = archive.read([v.name for v in variables])
    except EnforceNotMet as e:
        raise type(e)(f"deserialize_persistables: {e.args[0]}") from None
    finally:
        archive.close()
    from refimpl.core.scope import global_scope
    scope = global_scope()
    for name, a in values.items():
        scope.var(name).get_tensor().set(a)
    return None


def save_to_file(path: str, content: bytes) -> None:
    """Write ``content`` to ``path`` (atomically: a crash leaves the old file or the new one)."""
    if not isinstance(content, (bytes, bytearray)):
        raise InvalidArgument("save_to_file: 'content' type should be bytes.")
    if not isinstance(path, str) or not os.path.basename(path):
        raise InvalidArgument(f"save_to_file: path must name a file, got {path!r}")
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        raise NotFound(f"save_to_file: the directory {parent!r} of {path!r} does not exist")
    atomic_file.write_file(path, lambda f: f.write(bytes(content)))


def load_from_file(path: str) -> bytes:
    """The bytes of the file at ``path``."""
    if not isinstance(path, str) or not os.path.isfile(path):
        raise NotFound(f"load_from_file: file {path!r} does not exist")
    with open(path, "rb") as f:
        return f.read()
