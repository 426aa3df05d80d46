"""The MultiSlot text format: slots from variables, lines into instances, instances into batches.

Mirrors what Paddle's ``MultiSlotDataFeed`` / ``MultiSlotInMemoryDataFeed``
(``paddle/fluid/framework/data_feed.cc``) read: one instance per line, and
for every slot of ``use_var``, in that order, the number of values followed by
the values (``2 0.5 0.25 1 3`` is a float slot holding ``[0.5, 0.25]`` and an
int64 slot holding ``[3]``). A float32 variable is a ``"float"`` slot and an
int64 one a ``"uint64"`` slot, as ``DatasetBase._set_use_var`` declares them.
A dense slot (``lod_level`` 0) batches into the variable's shape with its one
-1 dim inferred from the number of values, as Paddle's feed does.

Differences from Paddle: Paddle aborts the process on a malformed line, reads
trailing tokens silently and reads a missing file as empty; here each is a
typed error naming the file and line (:class:`InvalidArgument`,
:class:`NotFound`). Paddle runs ``cat FILE | PIPE_COMMAND`` through a shell;
here the command is split with :func:`shlex.split` and run without a shell,
the file on its standard input, with a timeout (:data:`PIPE_TIMEOUT_S`).
Sparse slots (``lod_level`` 1) need LoD tensors, which refimpl does not have.
"""
from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Iterator, List, Sequence, Tuple, Type, TypeVar

import numpy as np

from refimpl.core.errors import (ExecutionTimeout, External, InvalidArgument, NotFound, Unimplemented)

__all__ = ["Slot", "slots_from_vars", "parse_line", "read_instances", "make_batch", "batches", "PIPE_TIMEOUT_S"]

PIPE_TIMEOUT_S = 600.0
"""Seconds one file's pipe command may run before :class:`ExecutionTimeout`."""

_SHELL_OPERATORS = {"|", "||", "&", "&&", ";", ">", ">>", "<", "2>", "2>&1"}

Instance = Tuple[np.ndarray, ...]
_N = TypeVar("_N", int, float)  # what _number parses a token as


@dataclass(frozen=True)
class Slot:
    """One slot of the format: the variable it feeds, its type ("float" / "uint64") and shape."""

    name: str
    type: str
    shape: Tuple[int, ...]

    @property
    def dtype(self) -> str:
        return "float32" if self.type == "float" else "int64"

    @property
    def width(self) -> int:
        """Values per instance when only dim 0 is -1 (the usual ``[-1, k]``); 0 when not fixed (``[-1]``
        takes any number per instance, as Paddle infers the -1 from the batch's total)."""
        rest = self.shape[1:]
        if len(self.shape) > 1 and self.shape[0] == -1 and all(d > 0 for d in rest):
            return int(np.prod(rest))
        return 0


def slots_from_vars(var_list: Sequence[Any], api: str = "dataset.init") -> List[Slot]:
    """The slots for ``use_var``: float32 → "float", int64 → "uint64" (Paddle supports only these)."""
    if not isinstance(var_list, (list, tuple)):
        raise InvalidArgument(f"{api}: use_var must be a list of Variables, got {type(var_list).__name__}")
    slots, seen = [], set()
    for var in var_list:
        name = getattr(var, "name", None)
        if not isinstance(name, str) or getattr(var, "shape", None) is None:
            raise InvalidArgument(f"{api}: use_var items must be Variables, got {type(var).__name__}")
        if name in seen:
            raise InvalidArgument(f"{api}: variable {name!r} appears twice in use_var")
        seen.add(name)
        if getattr(var, "lod_level", 0):
            raise Unimplemented(f"{api}: {name!r} has lod_level {var.lod_level}: sparse (LoD) slots need LoD "
                                f"tensors, which refimpl does not implement")
        dtype = str(getattr(var, "dtype", ""))
        if dtype not in ("float32", "int64"):
            raise InvalidArgument(f"{api}: {name!r} has dtype {dtype}; Currently, "
                                  f"paddle.distributed.fleet.dataset only supports dtype=float32 and dtype=int64")
        slots.append(Slot(name, "float" if dtype == "float32" else "uint64", tuple(var.shape)))
    return slots


def parse_line(line: str, slots: Sequence[Slot], where: str) -> Instance:
    """One instance from one MultiSlot line; ``where`` ("file a.txt, line 3") names it in errors."""
    tokens = line.split()
    values, pos = [], 0
    for slot in slots:
        if pos >= len(tokens):
            raise InvalidArgument(f"{where}: has {len(values)} slots, expected {len(slots)} "
                                  f"({[s.name for s in slots]}); slot {slot.name!r} is missing")
        count = _number(tokens[pos], int, where, f"the length of slot {slot.name!r}")
        if count <= 0:
            raise InvalidArgument(f"{where}: slot {slot.name!r} has length {count}; a slot holds at least one "
                                  f"value (pad it in the data generator)")
        if slot.width and count != slot.width:
            raise InvalidArgument(f"{where}: dense slot {slot.name!r} of shape {list(slot.shape)} takes "
                                  f"{slot.width} values per instance, got {count}")
        if pos + 1 + count > len(tokens):
            raise InvalidArgument(f"{where}: slot {slot.name!r} declares {count} values but the line has only "
                                  f"{len(tokens) - pos - 1} more tokens")
        kind = float if slot.type == "float" else int
        raw = tokens[pos + 1:pos + 1 + count]
        values.append(np.array([_number(t, kind, where, f"a value of slot {slot.name!r}") for t in raw],
                               dtype=slot.dtype))
        pos += 1 + count
    if pos != len(tokens):
        raise InvalidArgument(f"{where}: {len(tokens) - pos} tokens after the last slot {slots[-1].name!r}; "
                              f"expected exactly {len(slots)} slots ({[s.name for s in slots]})")
    return tuple(values)


def _number(token: str, kind: Type[_N], where: str, what: str) -> _N:
    try:
        return kind(token)
    except ValueError:
        expected = "an integer" if kind is int else "a number"
        raise InvalidArgument(f"{where}: {what} is {token!r}, not {expected}") from None


def _file_text(path: str, pipe_command: str) -> str:
    """The text of ``path`` as the data feed sees it: the file itself, or what ``pipe_command`` makes of it."""
    if not isinstance(path, str) or not os.path.isfile(path):
        raise NotFound(f"dataset: file {path!r} in the file list does not exist (or is not a file)")
    if pipe_command.strip() == "cat":
        with open(path, encoding="utf-8") as f:
            return f.read()
    argv = shlex.split(pipe_command)
    bad = [t for t in argv if t in _SHELL_OPERATORS]
    if not argv or bad:
        raise InvalidArgument(f"dataset: pipe command {pipe_command!r} runs without a shell: one command with "
                              f"its arguments, no pipes or redirections (got {bad})")
    try:
        with open(path, "rb") as stdin:
            done = subprocess.run(argv, stdin=stdin, capture_output=True, timeout=PIPE_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise NotFound(f"dataset: pipe command {pipe_command!r} for file {path!r}: program {argv[0]!r} "
                       f"not found") from None
    except subprocess.TimeoutExpired:
        raise ExecutionTimeout(f"dataset: pipe command {pipe_command!r} on file {path!r} ran longer than "
                               f"{PIPE_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace").strip()[-2000:]
        raise External(f"dataset: pipe command {pipe_command!r} on file {path!r} exited with status "
                       f"{done.returncode}; its stderr: {err or '(empty)'}")
    return done.stdout.decode("utf-8")


def read_instances(path: str, slots: Sequence[Slot], pipe_command: str = "cat") -> Iterator[Instance]:
    """The instances of one file, in line order (blank lines are skipped)."""
    text = _file_text(path, pipe_command)
    origin = f"file {path!r}" if pipe_command.strip() == "cat" else f"file {path!r} through {pipe_command!r}"
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            yield parse_line(line, slots, f"{origin}, line {number}")


def make_batch(instances: Sequence[Instance], slots: Sequence[Slot]) -> Dict[str, np.ndarray]:
    """The feed of one batch: per slot, the instances' values in the variable's shape."""
    feed = {}
    for i, slot in enumerate(slots):
        flat = np.concatenate([inst[i] for inst in instances])
        feed[slot.name] = flat.reshape(_batch_shape(slot, flat.size, len(instances)))
    return feed


def _batch_shape(slot: Slot, total: int, count: int) -> List[int]:
    shape = list(slot.shape)
    unknown = [i for i, d in enumerate(shape) if d < 0]
    known = int(np.prod([d for d in shape if d >= 0])) if shape else 1
    if len(unknown) > 1 or (not unknown and known != total) or (unknown and (known == 0 or total % known)):
        raise InvalidArgument(f"dataset: {count} instances give {total} values for slot {slot.name!r}, which do "
                              f"not fill its shape {list(slot.shape)}")
    if unknown:
        shape[unknown[0]] = total // known
    return shape


def batches(instances: Iterable[Instance], slots: Sequence[Slot], batch_size: int) -> Iterator[Dict[str, np.ndarray]]:
    """Feeds of ``batch_size`` instances (the last one smaller), in order."""
    chunk = []
    for inst in instances:
        chunk.append(inst)
        if len(chunk) == batch_size:
            yield make_batch(chunk, slots)
            chunk = []
    if chunk:
        yield make_batch(chunk, slots)
