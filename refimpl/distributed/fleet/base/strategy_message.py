"""Typed records for DistributedStrategy: the protobuf messages, without protobuf.

Mirrors the ``distributed_strategy_pb2`` messages that Paddle's
``DistributedStrategy`` keeps its settings in, and the helpers of
``distributed_strategy.py`` that move dicts in and out of them
(``get_msg_dict``, ``check_configs_key``, ``assign_configs_value``). A
:class:`Message` holds the fields of one message of ``strategy_schema``;
setting a field converts the value with protobuf's rules, so the same bad
values fail in the same way:

* int fields take ints (or anything with ``__index__``), never ``bool``
  or ``float``, and check the range (``Value out of range: ...``);
* bool fields take bools and ints; float fields take any real number and
  round it to float32 (``0.8`` reads back as ``0.800000011920929``); double
  fields keep it; string fields take ``str`` (or UTF-8 ``bytes``);
* repeated fields are *extended*, never replaced; a nested message cannot be
  assigned a dict (``Assignment not allowed to message field ...``);
* fields read and (scalars) write as attributes, as on a protobuf message:
  ``strategy.hybrid_configs["mp_configs"].sync_param``,
  ``strategy.sparse_table_configs[0].accessor.embed_sgd_param``.

``str(msg)`` is the text format, as protobuf's. Differences: a message
also reads like the dict it once was (``msg["field"]``, ``msg == {...}``
compares ``to_dict()``); errors are refimpl's typed errors that are also
the builtin Paddle raised (see ``compat_errors``), with messages naming the field; a
repeated message field filled from a list of dicts gets those dicts' values
(Paddle's ``assign_repeated_msg`` adds empty messages instead). Like
proto2, a field remembers whether it was set, for the text format
(``to_text`` / ``parse_text``, Paddle's prototxt).
"""
from __future__ import annotations

import codecs
import operator
import re
from typing import Any, Dict, Iterable, Optional

import numpy as np

from refimpl.core.errors import InvalidArgument

from .compat_errors import InvalidArgumentAssertion, InvalidArgumentAttribute, InvalidArgumentType
from .strategy_schema import ENUMS, MESSAGES

PACKAGE = "paddle.fleet"
_INT_RANGES = {"int32": (-2 ** 31, 2 ** 31 - 1), "int64": (-2 ** 63, 2 ** 63 - 1),
               "uint32": (0, 2 ** 32 - 1), "uint64": (0, 2 ** 64 - 1)}


class Field:
    """One field of a message: ``name``, ``type``, ``repeated``, ``default``, ``message`` (nested type)."""

    __slots__ = ("name", "type", "repeated", "default", "message")

    def __init__(self, spec: Any) -> None:
        self.name, kind = spec[0], spec[1]
        self.repeated = kind.endswith("*")
        self.type = kind.rstrip("*")
        self.message = self.type if self.type in MESSAGES else None
        self.default = None if self.repeated or self.message else convert_scalar(self.type, spec[2], self.name)


_FIELDS = {}


def fields_of(type_name: str) -> Dict[str, Field]:
    """The :class:`Field` list of message ``type_name`` (in field-number order)."""
    if type_name not in _FIELDS:
        _FIELDS[type_name] = {f.name: f for f in (Field(spec) for spec in MESSAGES[type_name])}
    return _FIELDS[type_name]


def _f32(x):
    with np.errstate(over="ignore"):
        return float(np.float32(x))


def convert_scalar(kind: str, value: Any, where: str) -> Any:
    """``value`` as protobuf would store it in a field of type ``kind``; ``where`` names the field."""
    if kind in _INT_RANGES:
        if isinstance(value, (bool, np.bool_)):
            raise InvalidArgumentType(f"Field {PACKAGE}.{where}: Expected an int, got a boolean.")
        v = _index(value)
        lo, hi = _INT_RANGES[kind]
        if not lo <= v <= hi:
            raise InvalidArgument(f"{where}: Value out of range: {v}")
        return v
    if kind == "bool":
        return bool(value) if isinstance(value, (bool, np.bool_)) else bool(_index(value))
    if kind in ("float", "double"):
        if isinstance(value, (str, bytes)) or not hasattr(type(value), "__float__"):
            raise InvalidArgumentType(f"{where}: must be real number, not {type(value).__name__}")
        return _f32(value) if kind == "float" else float(value)
    if kind == "string":
        if isinstance(value, bytes):
            return value.decode("utf-8")
        if not isinstance(value, str):
            raise InvalidArgumentType(f"{where}: expected a str, got {type(value).__name__} "
                                      f"(bad argument type for built-in operation)")
        return str(value)
    if kind.startswith("enum:"):
        values = ENUMS[kind[5:]]
        if isinstance(value, str) and value in values:
            return values[value]
        if not isinstance(value, str) and _index(value) in values.values():
            return _index(value)
        raise InvalidArgument(f"{where}: invalid enumerator {value!r}; expected one of {values}")
    raise InvalidArgument(f"{where}: unknown field type {kind!r}")


def _index(value):
    try:
        return operator.index(value)
    except TypeError as exc:
        raise InvalidArgumentType(str(exc)) from None


class Message:
    """The fields of one message of the schema; unset scalars read as their defaults."""

    __slots__ = ("type_name", "_data", "_touched")

    def __init__(self, type_name: str, values: Optional[Dict[str, Any]] = None) -> None:
        if type_name not in MESSAGES:
            raise InvalidArgument(f"unknown message type {type_name!r}")
        self.type_name, self._data = type_name, {}
        self._touched = False  # written to (even if the write failed): present in the text format
        if values:
            merge_dict(self, values)

    @property
    def fields(self) -> Dict[str, Field]:
        return fields_of(self.type_name)

    def field(self, name: str) -> Field:
        f = self.fields.get(name)
        if f is None:
            raise InvalidArgumentAttribute(f"{self.type_name} has no field {name!r}")
        return f

    def get(self, name: str) -> Any:
        """The value of ``name``: a scalar, a ``Message`` or a list (the stored one: mutate with care)."""
        f = self.field(name)
        if name not in self._data:
            if f.repeated:
                self._data[name] = []
            elif f.message:
                self._data[name] = Message(f.message)
            else:
                return f.default
        return self._data[name]

    def set(self, name: str, value: Any) -> None:
        """Set a singular scalar field (protobuf's ``setattr``)."""
        f = self.field(name)
        self._touched = True
        if f.repeated:
            raise InvalidArgumentAttribute(f"Assignment not allowed to map, or repeated field \"{name}\" in "
                                           f"protocol message object; extend it instead")
        if f.message:
            raise InvalidArgumentAttribute(f"Assignment not allowed to message field \"{name}\" in protocol "
                                           f"message object ({self.type_name}.{name} is a {f.message}; "
                                           f"set its keys one by one)")
        self._data[name] = convert_scalar(f.type, value, f"{self.type_name}.{name}")

    def extend(self, name: str, values: Iterable[Any]) -> None:
        """Append ``values`` to a repeated field (items of a message field may be dicts)."""
        f = self.field(name)
        self._touched = True
        try:
            items = list(values)
        except TypeError:
            raise InvalidArgumentType(f"{self.type_name}.{name} is a repeated field: it takes a list, "
                                      f"got {type(values).__name__}") from None
        if f.message:
            items = [v if isinstance(v, Message) else Message(f.message, v) for v in items]
        else:
            items = [convert_scalar(f.type, v, f"{self.type_name}.{name}") for v in items]
        self.get(name).extend(items)

    def has(self, name: str) -> bool:
        """Whether ``name`` was set (a nested message: whether any of its fields was)."""
        v = self._data.get(name)
        if isinstance(v, Message):
            return v.has_any()
        return bool(v) if isinstance(v, list) else name in self._data

    def has_any(self) -> bool:
        return self._touched or any(self.has(n) for n in self._data)

    def clear(self, name: str) -> None:
        self._data.pop(name, None)

    def to_dict(self, only_set: bool = False) -> Dict[str, Any]:
        """Every field (``only_set``: the set ones): nested messages as dicts, repeated fields as lists."""
        out = {}
        for name, f in self.fields.items():
            if only_set and not self.has(name):
                continue
            v = self.get(name) if (f.repeated or f.message) else self._data.get(name, f.default)
            if isinstance(v, Message):
                v = v.to_dict(only_set)
            elif isinstance(v, list):
                v = [x.to_dict(only_set) if isinstance(x, Message) else x for x in v]
            out[name] = v
        return out

    # ---- protobuf's attribute access (``msg.sync_param``, ``msg.accessor.fea_dim = 11``) ----------
    def __getattr__(self, name):  # called only for names that are not slots or methods: the fields
        if name.startswith("_"):
            raise AttributeError(name)
        return self.get(name)

    def __setattr__(self, name, value):
        if name in Message.__slots__:
            object.__setattr__(self, name, value)
        else:
            self.set(name, value)

    def __getitem__(self, name: str) -> Any:  # refimpl: dict-style reads too, as the getters once returned dicts
        return self.get(name)

    def __eq__(self, other):
        if isinstance(other, dict):  # refimpl: equal to its to_dict(), so old dict comparisons hold
            return self.to_dict() == other
        return isinstance(other, Message) and other.type_name == self.type_name and other.to_dict() == self.to_dict()

    __hash__ = None

    def __str__(self):  # protobuf's str(): the text format
        return to_text(self)

    def __repr__(self):
        return f"Message({self.type_name!r}, {{{', '.join(f'{k}={v!r}' for k, v in self._set_items())}}})"

    def _set_items(self):
        return [(n, self._data[n]) for n in self.fields if self.has(n)]


# ---- Paddle's dict helpers -----------------------------------------------------
def check_keys(msg: Message, config: Dict[str, Any], label: str) -> None:
    """Paddle's ``check_configs_key``: every key of ``config`` must be a field of ``msg``."""
    for key in config:
        if key not in msg.fields:
            raise InvalidArgumentAssertion(f"key:{key} not in {label} (the keys are: {', '.join(msg.fields)})")


def assign(msg: Message, config: Dict[str, Any]) -> None:
    """Paddle's ``assign_configs_value``: set scalars, extend repeated fields, in ``config`` order.

    Keys that are not fields are skipped; ``None`` for a repeated field is
    ignored. A failure leaves the keys before it assigned, as in Paddle.
    """
    for key, value in config.items():
        if key not in msg.fields:
            continue
        if msg.fields[key].repeated:
            if value is not None:
                msg.extend(key, value)
        else:
            msg.set(key, value)


def merge_dict(msg: Message, data: Dict[str, Any]) -> None:
    """Set ``msg`` from a (possibly partial) dict like ``to_dict()``: nested dicts recurse, lists replace."""
    for key, value in data.items():
        f = msg.field(key)
        if f.repeated:
            msg.clear(key)
            msg.extend(key, value)
        elif f.message:
            child = msg.get(key)
            child._touched = True
            merge_dict(child, value.to_dict() if isinstance(value, Message) else value)
        else:
            msg.set(key, value)


# ---- text format (Paddle's prototxt) -----------------------------------------------
def _format_float(v, is_float32):
    """C's ``%g`` with the fewest digits that read back the same value (protobuf's text encoder)."""
    if not np.isfinite(v):
        return "nan" if np.isnan(v) else ("inf" if v > 0 else "-inf")
    short, full = (6, 9) if is_float32 else (15, 17)
    text = "%.*g" % (short, v)
    back = _f32(float(text)) if is_float32 else float(text)
    return text if back == v else "%.*g" % (full, v)


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", '"': '\\"', "'": "\\'", "\\": "\\\\"}


def _escape(c):
    if c in _ESCAPES:
        return _ESCAPES[c]
    return "\\%03o" % ord(c) if ord(c) < 32 or ord(c) == 127 else c


def _format(f, v):
    if f.type == "bool":
        return "true" if v else "false"
    if f.type == "string":
        return '"' + "".join(_escape(c) for c in v) + '"'
    if f.type in ("float", "double"):
        return _format_float(v, f.type == "float")
    if f.type.startswith("enum:"):
        return next(k for k, n in ENUMS[f.type[5:]].items() if n == v)
    return str(v)


def to_text(msg: Message, indent: int = 0) -> str:
    """Protobuf text format of the set fields of ``msg`` (``str(message)`` in Paddle)."""
    pad, out = " " * indent, []
    for name, v in msg._set_items():
        f = msg.fields[name]
        for item in (v if f.repeated else [v]):
            if f.message:
                out.append(f"{pad}{name} {{\n{to_text(item, indent + 2)}{pad}}}\n")
            else:
                out.append(f"{pad}{name}: {_format(f, item)}\n")
    return "".join(out)


_TOKEN = re.compile(r"""\s+ | \#[^\n]*                        # blanks and comments are skipped
                        | (?P<tok> "(?:[^"\\\n]|\\.)*" | '(?:[^'\\\n]|\\.)*'  # quoted strings
                                 | [{}:<>;,\[\]]                  # punctuation
                                 | [^\s{}:<>;,\[\]"']+ )          # names and numbers""", re.VERBOSE)


def parse_text(msg: Message, text: str) -> Message:
    """Merge protobuf text format into ``msg`` (Paddle's ``load_from_prototxt``)."""
    toks, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise InvalidArgument(f"prototxt: cannot read {text[pos:pos + 20]!r}")
        if m.group("tok"):
            toks.append(m.group("tok"))
        pos = m.end()
    rest = _parse_fields(msg, toks, 0)
    if rest != len(toks):
        raise InvalidArgument(f"prototxt: unexpected {toks[rest]!r}")
    return msg


def _parse_fields(msg, toks, i):
    while i < len(toks) and toks[i] not in ("}", ">"):
        f = msg.field(toks[i])
        i += 1
        if toks[i] == ":":
            i += 1
        if f.message:
            if toks[i] not in ("{", "<"):
                raise InvalidArgument(f"prototxt: expected '{{' after {f.name}")
            child = Message(f.message)
            i = _parse_fields(child, toks, i + 1) + 1
            if f.repeated:
                msg.get(f.name).append(child)
            else:
                _merge_set(msg.get(f.name), child)
        else:
            value = _scalar_token(f, toks[i])
            msg.extend(f.name, [value]) if f.repeated else msg.set(f.name, value)
            i += 1
        if i < len(toks) and toks[i] in (";", ","):
            i += 1
    return i


def _merge_set(dst, src):
    for name, v in src._set_items():
        if isinstance(v, Message):
            _merge_set(dst.get(name), v)
        elif isinstance(v, list):
            dst.get(name).extend(v)
        else:
            dst._data[name] = v


def _scalar_token(f, tok):
    if tok[0] in "\"'":
        return codecs.escape_decode(tok[1:-1].encode("utf-8"))[0].decode("utf-8")
    if f.type == "bool":
        return tok in ("true", "True", "t", "1")
    if f.type in ("float", "double"):
        return float(tok.rstrip("fF"))
    if f.type.startswith("enum:"):
        return tok if not tok.lstrip("-").isdigit() else int(tok)
    return int(tok, 0)
