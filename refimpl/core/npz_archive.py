"""The ``.npz`` archive that checkpoints are made of, written and read without pickle.

Mirrors the role of Paddle's tensor files (``python/paddle/static/io.py`` pickles a
``{name: ndarray}`` dict; ``save_combine`` writes a tensor stream): here one
archive holds one ``.npy`` entry per variable, readable by ``np.load``.
Differences from ``np.savez`` / ``np.load``:

* **Never pickle.** Object arrays are refused when writing and reading.
* **Checked before allocating.** :class:`NpzReader` parses every entry's
  ``.npy`` header first and checks that the shape and dtype it declares
  account for exactly the bytes the entry holds (an entry whose header
  claims 400 GB is refused without allocating them); callers compare the
  headers with what they expect (the program's shapes) before any data is
  read. A truncated or corrupted archive, a plain ``.npy`` file, a bad CRC
  or an entry that is not ``.npy`` raise ``InvalidArgument`` naming the file
  and the entry; a missing file raises ``NotFound``.
* **A comment that vouches for the directory.** The archive's zip comment
  (invisible to ``np.load``) reads ``refimpl-npz entries=N`` and, for a file
  of a multi-file save, `` save=<id>``. A reader checks ``N`` against the
  entries it found, so damage to the central directory that hides entries
  (which ``np.load`` reads as a smaller, valid archive) is an error.
  Archives without the comment (``np.savez``) are read as they are.
"""
from __future__ import annotations

import math
import os
import zipfile
import zlib
from typing import IO, Dict, Iterable, Mapping, Optional, Tuple

import numpy as np

from refimpl.core.errors import InvalidArgument, NotFound

Header = Tuple[Tuple[int, ...], np.dtype, bool]  # shape, dtype, fortran_order
# what zipfile and numpy raise on damaged input (RuntimeError: an encrypted entry; NotImplementedError:
# an unknown compression method)
_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, ValueError, EOFError, OSError, KeyError,
           RuntimeError, NotImplementedError)


_COMMENT = "refimpl-npz"


def write(f: IO[bytes], arrays: Mapping[str, np.ndarray], save_id: Optional[str] = None) -> None:
    """Write ``{name: array}`` to the open binary file ``f`` as an uncompressed ``.npz``."""
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
        for name, arr in arrays.items():
            arr = np.asarray(arr)
            if arr.dtype.hasobject:
                raise InvalidArgument(f"cannot save {name!r}: object arrays are not supported")
            with z.open(name + ".npy", "w", force_zip64=True) as entry:
                np.lib.format.write_array(entry, arr, allow_pickle=False)
        z.comment = (f"{_COMMENT} entries={len(arrays)}" + (f" save={save_id}" if save_id else "")).encode("ascii")


def _read_header(fp: IO[bytes]) -> Header:
    version = np.lib.format.read_magic(fp)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp)
    else:
        raise ValueError(f".npy format version {version} is not supported")
    return tuple(shape), dtype, bool(fortran)


class NpzReader:
    """One open archive: its comment, its entries' headers, then the arrays asked for.

    Use as a context manager; everything is read through one open file, so
    a rename over the path while reading does not mix two files.
    """

    def __init__(self, path: str, what: str = "checkpoint file") -> None:
        self.path, self.what = path, what
        if not os.path.isfile(path):
            raise NotFound(f"{what} {path!r} does not exist")
        try:
            self._zip = zipfile.ZipFile(path)
        except _ERRORS as e:
            raise self._corrupt(e, plain_npy=_is_plain_npy(path)) from None
        try:
            self.save_id = self._check_comment()
            self.headers = self._read_headers()
        except BaseException:
            self._zip.close()
            raise

    def __enter__(self) -> "NpzReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._zip.close()

    def _check_comment(self) -> Optional[str]:
        """The save id the comment names (None if none); the entry count it vouches for is checked."""
        words = self._zip.comment.decode("ascii", "replace").split(" ")
        if words[0] != _COMMENT:
            return None
        fields = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        found = len(self._zip.infolist())
        if fields.get("entries") != str(found):
            raise InvalidArgument(f"{self.what} {self.path!r} is truncated or corrupted: its directory lists "
                                  f"{found} entries, the archive was written with {fields.get('entries')}")
        return fields.get("save")

    def _corrupt(self, e: BaseException, entry: Optional[str] = None, plain_npy: bool = False) -> InvalidArgument:
        where = f"{self.what} {self.path!r}" + (f", entry {entry!r}," if entry else "")
        if plain_npy:
            return InvalidArgument(f"{where} is a single .npy array, not an .npz archive of named arrays")
        return InvalidArgument(f"{where} is truncated or corrupted ({type(e).__name__}: {e})")

    def _read_headers(self) -> Dict[str, Header]:
        size = os.path.getsize(self.path)
        out: Dict[str, Header] = {}
        for info in self._zip.infolist():
            if not info.filename.endswith(".npy"):
                raise InvalidArgument(f"{self.what} {self.path!r}: entry {info.filename!r} is not a .npy array")
            name = info.filename[:-4]
            try:
                with self._zip.open(info) as fp:
                    shape, dtype, fortran = _read_header(fp)
                    data_bytes = info.file_size - fp.tell()
            except _ERRORS as e:
                raise self._corrupt(e, name) from None
            if dtype.hasobject:
                raise InvalidArgument(f"{self.what} {self.path!r}: entry {name!r} holds Python objects "
                                      f"(pickle), which are refused")
            claimed = math.prod(shape) * dtype.itemsize
            if claimed != data_bytes or info.compress_size > size:
                raise InvalidArgument(f"{self.what} {self.path!r}: entry {name!r} declares shape {list(shape)} "
                                      f"dtype {dtype} ({claimed} bytes) but holds {data_bytes} bytes: "
                                      f"truncated or corrupted")
            out[name] = (tuple(shape), dtype, fortran)
        return out

    def read(self, names: Optional[Iterable[str]] = None) -> Dict[str, np.ndarray]:
        """The arrays ``names`` (default: all), each read into memory of exactly its declared size."""
        out = {}
        for name in (self.headers if names is None else names):
            if name not in self.headers:
                raise NotFound(f"entry {name!r} is not in {self.what} {self.path!r}")
            shape, dtype, fortran = self.headers[name]
            try:
                out[name] = self._read_one(name, shape, dtype, fortran)
            except _ERRORS as e:
                raise self._corrupt(e, name) from None
        return out

    def _read_one(self, name: str, shape: Tuple[int, ...], dtype: np.dtype, fortran: bool) -> np.ndarray:
        arr = np.empty(shape[::-1] if fortran else shape, dtype)
        with self._zip.open(name + ".npy") as fp:
            _read_header(fp)
            view = memoryview(arr.reshape(-1).view(np.uint8)) if arr.nbytes else memoryview(b"")
            got = 0
            while got < arr.nbytes:
                n = fp.readinto(view[got:])
                if not n:
                    raise EOFError(f"entry ended after {got} of {arr.nbytes} bytes")
                got += n
            if fp.read(1):  # also makes zipfile check the entry's CRC
                raise ValueError("entry holds more bytes than its header declares")
        return arr.T if fortran else arr


def _is_plain_npy(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(6) == b"\x93NUMPY"
    except OSError:
        return False


def read(path: str, what: str = "checkpoint file") -> Dict[str, np.ndarray]:
    """Every array of the archive at ``path`` (typed errors name the file and the entry)."""
    with NpzReader(path, what) as r:
        return r.read()
