"""``paddle.save`` / ``paddle.load`` (also ``paddle.framework.save`` / ``load``) for static-graph scripts.

Mirrors ``python/paddle/framework/io.py``: ``save(obj, path, protocol=4,
**configs)`` stores a Program, a state dict (``program.state_dict()``:
name -> tensor), a single tensor or array, or nested dicts / lists / tuples
of those and of plain numbers, strings and bytes; ``load(path, **configs)``
gives it back, the arrays as ``DenseTensor`` (as Paddle does in static mode;
``return_numpy=True``: NumPy arrays). ``path`` is a file path (its directory
is created) or an ``io.BytesIO``. Differences from Paddle:

* **No pickle.** A Program is stored as its ``program/v1`` JSON document
  (``Program.to_dict``, what ``static.save`` writes to ``.pdmodel``), not a
  protobuf. Anything else is a NumPy ``.npz`` archive
  (``refimpl.core.npz_archive``): one ``.npy`` entry per array, named by its
  key when the object is a dict with string keys (so ``np.load`` of a saved
  state dict gives ``{name: array}``), else ``@SAVE@.<n>``, plus an entry
  ``@PADDLE_SAVE@``: the UTF-8 JSON manifest ``{"format": "paddle.save/v1",
  "obj": node}`` that records the nesting. A node is ``{"array": entry,
  "kind": "tensor" | "ndarray" | "scalar" | "bytes"}``, ``{"dict": [[key
  node, value node] ...]}``, ``{"list": [...]}``, ``{"tuple": [...]}`` or
  ``{"value": None | bool | int | float | str}``. Any other type raises
  ``InvalidArgument`` naming ``paddle.save`` and the type. ``load`` also
  reads an archive without a manifest (``static.save``'s ``.pdparams``) as
  ``{name: tensor}``.
* A static ``Variable`` is saved as its value in the global scope.
* Files are written atomically (``refimpl.core.atomic_file``). In a
  ``BytesIO`` each saved object is one frame, ``b"REFIMPL-SAVE\\0"``, its
  length (8 bytes, little endian) and the payload, so that several objects
  can follow one another and ``load`` reads the one at the position.
* ``use_binary_format`` and ``safetensors`` (Paddle's other formats) raise
  Unimplemented; ``model_filename`` / ``params_filename`` / ``keep_name_table``
  are accepted by ``load`` and change nothing.
"""
from __future__ import annotations

import io as _pyio
import json
import os
import struct
import tempfile
import warnings
from typing import Any, Callable, Dict, Optional, Sequence

import numpy as np

from refimpl.core import atomic_file, npz_archive
from refimpl.core.errors import EnforceNotMet, InvalidArgument, NotFound, Unimplemented
from refimpl.core.tensor import DenseTensor

from .program import Program
from .variable import Variable

__all__ = ["save", "load"]

SAVE_FORMAT = "paddle.save/v1"
MANIFEST = "@PADDLE_SAVE@"
_FRAME = b"REFIMPL-SAVE\0"
_SAVE_CONFIGS = ("use_binary_format", "pickle_protocol", "safetensors")
_LOAD_CONFIGS = ("model_filename", "params_filename", "keep_name_table", "return_numpy", "safetensors")
_PLAIN = (type(None), bool, int, float, str)


class BytesArchive:
    """An ``npz_archive.NpzReader`` over bytes (a temporary file, removed on ``close``); errors name ``<memory>``."""

    def __init__(self, data: bytes, what: str) -> None:
        fd, self._tmp = tempfile.mkstemp(suffix=".npz")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        self.path = "<memory>"
        try:
            self._reader = self._call(npz_archive.NpzReader, self._tmp, what)
        except BaseException:
            os.unlink(self._tmp)
            raise
        self.headers = self._reader.headers

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except EnforceNotMet as e:
            raise type(e)(str(e.args[0]).replace(repr(self._tmp) + " ", "").replace(self._tmp, "")) from None

    def read(self, names: Optional[Sequence[str]] = None) -> Dict[str, np.ndarray]:
        return self._call(self._reader.read, names)

    def close(self) -> None:
        self._reader.close()
        if os.path.exists(self._tmp):
            os.unlink(self._tmp)

    def __enter__(self) -> "BytesArchive":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- object <-> manifest + arrays ------------------------------------------------------
class _Encoder:
    def __init__(self, obj: Any) -> None:
        self.arrays: Dict[str, np.ndarray] = {}
        named = isinstance(obj, dict) and all(isinstance(k, str) and k != MANIFEST for k in obj)
        self.node = self.encode(obj, named)

    def _array(self, a: np.ndarray, kind: str, key: Optional[str]) -> Dict[str, Any]:
        if a.dtype.hasobject:
            raise InvalidArgument("paddle.save: cannot save an array of Python objects (dtype object)")
        name, n = key, len(self.arrays)
        while name is None or name in self.arrays:
            name, n = f"@SAVE@.{n}", n + 1
        self.arrays[name] = a
        return {"array": name, "kind": kind}

    def encode(self, obj: Any, named: bool = False, key: Optional[str] = None) -> Dict[str, Any]:
        if isinstance(obj, np.generic):  # before _PLAIN: np.float64 is a float
            return self._array(np.asarray(obj), "scalar", key)
        if isinstance(obj, _PLAIN):
            return {"value": obj}
        if isinstance(obj, np.ndarray):
            return self._array(obj, "ndarray", key)
        if isinstance(obj, DenseTensor):
            return self._array(np.array(obj), "tensor", key)
        if isinstance(obj, Variable):
            return self._array(np.array(obj.get_value()), "tensor", key)
        if isinstance(obj, (bytes, bytearray)):
            return self._array(np.frombuffer(bytes(obj), np.uint8), "bytes", key)
        if isinstance(obj, dict):
            items = []
            for k, v in obj.items():
                if not isinstance(k, _PLAIN):
                    raise InvalidArgument(f"paddle.save: cannot save a dict key of type {type(k).__name__}")
                items.append([{"value": k}, self.encode(v, key=str(k) if named else None)])
            return {"dict": items}
        if isinstance(obj, (list, tuple)):
            return {"list" if isinstance(obj, list) else "tuple": [self.encode(v) for v in obj]}
        if isinstance(obj, Program):
            raise InvalidArgument("paddle.save: a Program can only be saved on its own, not inside a container")
        raise InvalidArgument(f"paddle.save: cannot save an object of type {type(obj).__module__}."
                              f"{type(obj).__qualname__} (refimpl stores Programs, tensors, arrays and "
                              f"dicts / lists / tuples of them and of numbers, strings and bytes)")


def _decode(node: Any, arrays: Dict[str, np.ndarray], return_numpy: bool, where: str) -> Any:
    if not isinstance(node, dict) or len(node) not in (1, 2):
        raise InvalidArgument(f"paddle.load: {where}: malformed manifest node {node!r:.80}")
    if "value" in node:
        return node["value"]
    if "array" in node:
        a = arrays.get(node["array"]) if isinstance(node["array"], str) else None
        if a is None:
            raise InvalidArgument(f"paddle.load: {where}: the manifest names entry {node['array']!r}, "
                                  f"which the archive lacks")
        kind = node.get("kind")
        if kind == "scalar":
            return a[()]
        if kind == "bytes":
            return a.tobytes()
        if kind not in ("tensor", "ndarray"):
            raise InvalidArgument(f"paddle.load: {where}: unknown array kind {kind!r}")
        return a if return_numpy else DenseTensor(a)
    for tag in ("dict", "list", "tuple"):
        if tag in node and isinstance(node[tag], list):
            if tag != "dict":
                items = [_decode(v, arrays, return_numpy, where) for v in node[tag]]
                return items if tag == "list" else tuple(items)
            if not all(isinstance(kv, list) and len(kv) == 2 for kv in node[tag]):
                raise InvalidArgument(f"paddle.load: {where}: malformed dict node")
            return {_decode(k, arrays, return_numpy, where): _decode(v, arrays, return_numpy, where)
                    for k, v in node[tag]}
    raise InvalidArgument(f"paddle.load: {where}: malformed manifest node {node!r:.80}")


def _payload(obj: Any) -> bytes:
    if isinstance(obj, Program):
        return json.dumps(obj.to_dict(), sort_keys=True).encode("utf-8")
    enc = _Encoder(obj)
    manifest = json.dumps({"format": SAVE_FORMAT, "obj": enc.node}).encode("utf-8")
    buf = _pyio.BytesIO()
    npz_archive.write(buf, dict(enc.arrays, **{MANIFEST: np.frombuffer(manifest, np.uint8)}))
    return buf.getvalue()


def _from_payload(data: bytes, where: str, return_numpy: bool) -> Any:
    if data[:2] == b"PK":
        with BytesArchive(data, f"paddle.load file {where}") as r:
            arrays = r.read()
        if MANIFEST not in arrays:  # an archive of static.save: {name: tensor}
            return {n: (a if return_numpy else DenseTensor(a)) for n, a in arrays.items()}
        try:
            doc = json.loads(arrays.pop(MANIFEST).tobytes().decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise InvalidArgument(f"paddle.load: {where}: its manifest is not JSON ({e})") from None
        if not isinstance(doc, dict) or doc.get("format") != SAVE_FORMAT:
            raise InvalidArgument(f"paddle.load: {where}: its manifest is not a {SAVE_FORMAT} document")
        return _decode(doc.get("obj"), arrays, return_numpy, where)
    try:
        doc = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise InvalidArgument(f"`paddle.load` can not parse the file:{where} (refimpl reads the .npz archives "
                              f"and program/v1 JSON that refimpl's paddle.save writes)") from None
    try:
        return Program.from_dict(doc)
    except EnforceNotMet as e:
        raise type(e)(f"paddle.load: {where}: {e.args[0]}") from None


def _holds_paddle_value(obj: Any) -> bool:
    if isinstance(obj, (DenseTensor, Variable, Program)):
        return True
    values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    return any(_holds_paddle_value(v) for v in values)


def _is_state_dict(obj: Any) -> bool:
    """Paddle's ``_is_state_dict``: a dict of tensors, or of dicts that hold no tensor or Program."""
    return isinstance(obj, dict) and all(
        isinstance(v, (DenseTensor, Variable)) or (isinstance(v, dict) and not _holds_paddle_value(v))
        for v in obj.values())


# ---- the API ------------------------------------------------------------------------
def _check_protocol(protocol: Any) -> None:
    if not isinstance(protocol, int) or isinstance(protocol, bool):
        raise InvalidArgument(f"paddle.save: The 'protocol' MUST be `int`, but received {type(protocol)}")
    if protocol < 2 or protocol > 4:
        raise InvalidArgument(f"paddle.save: Expected 1<'protocol'<5, but received protocol={protocol}")


def save(obj: Any, path: Any, protocol: int = 4, **configs: Any) -> None:
    """Save ``obj`` to the file ``path`` (or append it to the ``BytesIO`` ``path``)."""
    for key in configs:
        if key not in _SAVE_CONFIGS:
            raise InvalidArgument(f"The additional config ({key}) of `paddle.save` is not supported.")
    for key in ("use_binary_format", "safetensors"):
        if configs.get(key, False):
            raise Unimplemented(f"paddle.save: {key}=True (Paddle's other file formats) is not implemented "
                                f"by refimpl")
    if configs.get("pickle_protocol") is not None:
        warnings.warn("'pickle_protocol' is a deprecated argument. Please use 'protocol' instead.")
        protocol = configs["pickle_protocol"]
    if isinstance(path, str):
        if os.path.basename(path) == "":
            raise InvalidArgument("paddle.save: The input path MUST be format of dirname/filename "
                                  "[dirname\\filename in Windows system], but received filename is empty string.")
        if os.path.isdir(path):
            raise InvalidArgument(f"paddle.save: {path!r} is a directory; give the path of a file to write")
    elif not isinstance(path, _pyio.BytesIO):
        raise InvalidArgument(f"paddle.save: only supports saving objects to file and `BytesIO`, but got "
                              f"{type(path)}")
    if not isinstance(obj, Program) and not _is_state_dict(obj):  # as Paddle: its static state-dict saver
        _check_protocol(protocol)                                   # takes any protocol
    data = _payload(obj)
    if isinstance(path, _pyio.BytesIO):
        path.write(_FRAME + struct.pack("<Q", len(data)) + data)
        return
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_file.write_file(path, lambda f: f.write(data))


def load(path: Any, **configs: Any) -> Any:
    """What :func:`save` stored at ``path`` (a file path or a ``BytesIO`` at the frame to read)."""
    for key in configs:
        if key not in _LOAD_CONFIGS:
            raise InvalidArgument(f"The additional config ({key}) of `paddle.load` is not supported.")
    if configs.get("safetensors", False):
        raise Unimplemented("paddle.load: safetensors=True is not implemented by refimpl")
    return_numpy = bool(configs.get("return_numpy", False))
    if isinstance(path, _pyio.BytesIO):
        head = path.read(len(_FRAME) + 8)
        if len(head) < len(_FRAME) + 8 or not head.startswith(_FRAME):
            raise InvalidArgument("paddle.load: the BytesIO does not hold an object saved by refimpl's "
                                  "paddle.save at its current position")
        (n,) = struct.unpack("<Q", head[len(_FRAME):])
        data = path.read(n)
        if len(data) != n:
            raise InvalidArgument(f"paddle.load: the BytesIO ends {n - len(data)} bytes into a saved object")
        return _from_payload(data, "<BytesIO>", return_numpy)
    if not isinstance(path, str):
        raise InvalidArgument(f"paddle.load: path must be a file path or a BytesIO, got {type(path)}")
    if not os.path.isfile(path):
        raise NotFound(f"paddle.load: The ``path`` ({path}) to load model not exists.")
    with open(path, "rb") as f:
        return _from_payload(f.read(), repr(path), return_numpy)
