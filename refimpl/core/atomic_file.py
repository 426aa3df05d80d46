"""Writing files so that a crash leaves either the old content or the new one.

Mirrors what Paddle's savers rely on without spelling out
(``python/paddle/framework/io.py`` writes the final path directly; its
``paddle.distributed.checkpoint`` writes per-rank files and then a metadata
file). Here every file is first written to a temporary file beside it, which
is flushed and fsynced, and then renamed over the final path with
``os.replace`` (atomic on POSIX and Windows); the directory is fsynced so
the rename itself survives a power cut.

:func:`write_files` writes several files that way: all temporaries first,
then the renames in the order given, with a directory fsync before the last
one. The renames of several files cannot be atomic together, so a *set* of
files that must be all-or-nothing for a reader (a checkpoint's
``.pdparams``, ``.pdopt`` and ``.pdmodel``) is written by :func:`write_set`:
it draws a save id, lets each file carry it (the caller's writers stamp it
in), renames the files, and renames last a manifest
``<prefix>.manifest.json`` (``{"format", "save_id", "files": {name: bytes}}``)
that commits the set. A reader passes the ids it found in the files it
read to :func:`check_set`, which raises ``InvalidArgument`` when they carry
two different ids (the writer was killed between two renames), or when a
stamped file meets an unstamped one (an older layout, or a file written by
hand) and the manifest does not commit the stamped file's save (the writer
was killed while overwriting an older checkpoint). Files that all carry one
id are the whole files of one save, committed or not; files without any id
are not matched against anything.

Details a reader of the files may rely on:

* temporaries are named ``.<name>.<pid>@<host>.<hex>.tmp`` and created with
  mode ``0o666`` filtered by the process umask, so the final files get the
  umask's mode (``tempfile.mkstemp`` would give ``0o600``);
* on any error or interrupt (``KeyboardInterrupt`` included) every temporary
  not yet renamed is removed, so no full-size copy is left behind;
* a temporary left by a killed process (whose pid no longer runs on this
  host) is removed by the next write of the same file.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import socket
import uuid
from typing import IO, Any, Callable, Dict, List, Optional, Tuple

from refimpl.core.errors import InvalidArgument

Writer = Callable[[IO[bytes]], Any]
MANIFEST_SUFFIX = ".manifest.json"
MANIFEST_FORMAT = "checkpoint-manifest/v1"


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname()) or "host"


def _temp_pattern(base: str) -> "re.Pattern[str]":
    return re.compile(r"^\." + re.escape(base) + r"\.(\d+)@([A-Za-z0-9_-]+)\.[0-9a-f]+\.tmp$")


def _pid_alive(pid: int) -> bool:
    if os.name == "nt":  # os.kill would terminate the process there: assume it runs
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def remove_stale_temps(path: str) -> List[str]:
    """Remove temporaries of ``path`` left by dead processes of this host; return their names."""
    d, base = os.path.split(os.path.abspath(path))
    pattern, host, removed = _temp_pattern(base), _host(), []
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        return removed
    for name in names:
        m = pattern.match(name)
        if m is None or m.group(2) != host or int(m.group(1)) == os.getpid() or _pid_alive(int(m.group(1))):
            continue
        try:
            os.unlink(os.path.join(d, name))
            removed.append(name)
        except FileNotFoundError:  # another process cleaned it first
            pass
    return removed


def _temp_write(path: str, write: Writer) -> str:
    """Write ``path``'s new content to a fsynced temporary file beside it; return its name."""
    d, base = os.path.split(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    remove_stale_temps(path)
    while True:
        tmp = os.path.join(d, f".{base}.{os.getpid()}@{_host()}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def fsync_dir(d: str) -> None:
    """Make the renames in directory ``d`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_files(contents: Dict[str, Writer]) -> None:
    """Write ``{path: writer(fileobj)}``: each file ends up old or new, never partial.

    The renames happen in the dict's order, the last one after a directory
    fsync: put the file that commits the set (a manifest) last.
    """
    pairs: List[Tuple[str, str]] = []
    done = 0
    try:
        for path, write in contents.items():
            pairs.append((_temp_write(path, write), path))
        for i in range(len(pairs)):
            _commit_one(pairs, i)
            done = i + 1
    except BaseException:
        for tmp, _ in pairs[done:]:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        raise


def _commit_one(pairs: List[Tuple[str, str]], i: int) -> None:
    """Rename pair ``i``; fsync the directories before the last rename of several, and after it."""
    dirs = sorted({os.path.dirname(os.path.abspath(p)) for _, p in pairs})
    last = i == len(pairs) - 1
    if last and i > 0:
        for d in dirs:
            fsync_dir(d)
    os.replace(*pairs[i])
    if last:
        for d in dirs:
            fsync_dir(d)


def write_file(path: str, write: Writer) -> None:
    """Write one file atomically (see :func:`write_files`)."""
    write_files({path: write})


# ---- sets of files, committed by a manifest --------------------------------------------------
def write_set(prefix: str, files: Dict[str, Callable[[str], Writer]]) -> str:
    """Write ``{suffix: make_writer(save_id)}`` as files ``prefix + suffix``, then the manifest; the save id."""
    save_id = uuid.uuid4().hex
    sizes: Dict[str, int] = {}

    def sized(name: str, write: Writer) -> Writer:
        def run(f: IO[bytes]) -> None:
            write(f)
            sizes[name] = f.tell()
        return run

    def manifest(f: IO[bytes]) -> None:
        doc = {"format": MANIFEST_FORMAT, "save_id": save_id, "files": sizes}
        f.write(json.dumps(doc, sort_keys=True).encode("utf-8"))
    contents = {prefix + sfx: sized(os.path.basename(prefix + sfx), make(save_id)) for sfx, make in files.items()}
    contents[prefix + MANIFEST_SUFFIX] = manifest
    write_files(contents)
    return save_id


def read_manifest(prefix: str) -> Optional[Dict[str, Any]]:
    """The manifest committing the set at ``prefix`` (None if there is none); typed errors name it."""
    path = prefix + MANIFEST_SUFFIX
    if not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise InvalidArgument(f"checkpoint manifest {path!r} is truncated or corrupted ({e})") from None
    if not (isinstance(doc, dict) and doc.get("format") == MANIFEST_FORMAT and isinstance(doc.get("save_id"), str)
            and isinstance(doc.get("files"), dict)):
        raise InvalidArgument(f"checkpoint manifest {path!r} is not a {MANIFEST_FORMAT} document")
    return doc


def check_set(prefix: str, stamps: Dict[str, Optional[str]]) -> None:
    """The files of ``stamps`` ({path: the save id it carries, or None}) come from one save, or a typed error.

    Files stamped with one id are the complete files of that save (each was
    renamed whole). Stamped and unstamped files together are accepted only
    when the manifest commits the stamped ones' save: the unstamped files
    were then put there after it (by hand), not left by a save that was
    interrupted over an older, unstamped checkpoint.
    """
    stamped = {p: sid for p, sid in stamps.items() if sid}
    if not stamped:
        return
    first, sid = next(iter(stamped.items()))
    for path, other in stamped.items():
        if other != sid:
            raise InvalidArgument(f"checkpoint files {first!r} and {path!r} come from two saves ({sid} and "
                                  f"{other}): a save was interrupted between its renames (or ran during "
                                  f"this read); refusing to mix them")
    manifest, mpath = read_manifest(prefix), prefix + MANIFEST_SUFFIX
    if manifest is None or manifest["save_id"] != sid:
        unstamped = [p for p, s in stamps.items() if not s]
        if unstamped:
            raise InvalidArgument(f"checkpoint file {first!r} belongs to save {sid}, which the manifest "
                                  f"{mpath!r} does not commit (that save was interrupted), and {unstamped[0]!r} "
                                  f"carries no save id: refusing to pair them")
        return
    for path in stamped:
        size = manifest["files"].get(os.path.basename(path))
        if size is not None and size != os.path.getsize(path):
            raise InvalidArgument(f"checkpoint file {path!r} has {os.path.getsize(path)} bytes, its manifest "
                                  f"{mpath!r} says {size}: truncated or corrupted")
