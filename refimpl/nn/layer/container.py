"""Containers: ``Sequential`` and ``LayerList`` (``python/paddle/nn/layer/container.py``).

Sublayers are registered under ``"0"``, ``"1"`` ... (or the names given to
``Sequential``), so their parameters' structured names are ``0.weight``,
``blocks.1.attn.q.bias``. Index errors are ``OutOfRange`` (an IndexError), as
Paddle's IndexError, with its message.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Iterable, Iterator, Optional, Union

from refimpl.core.errors import InvalidArgument, OutOfRange

from .layers import Layer

__all__ = ["Sequential", "LayerList"]


class Sequential(Layer):
    """Calls its sublayers in order: ``Sequential(a, b)(x) == b(a(x))``; also ``Sequential(("n", a), ...)``."""

    def __init__(self, *layers: Any) -> None:
        super().__init__()
        if layers and isinstance(layers[0], OrderedDict):
            items = list(layers[0].items())
        elif layers and isinstance(layers[0], (list, tuple)):
            items = [tuple(pair) for pair in layers]
        else:
            items = [(str(i), layer) for i, layer in enumerate(layers)]
        for name, layer in items:
            self.add_sublayer(name, layer)

    def __getitem__(self, name: Union[int, str, slice]) -> Any:
        if isinstance(name, slice):
            return type(self)(*list(self._sub_layers.values())[name])
        if isinstance(name, str):
            return self._sub_layers[name]
        n = len(self._sub_layers)
        if not -n <= name < n:
            raise OutOfRange(f"index {name} is out of range")
        return list(self._sub_layers.values())[name]

    def __setitem__(self, name: Union[int, str], layer: Layer) -> None:
        setattr(self, str(name), layer)

    def __delitem__(self, name: Union[int, str]) -> None:
        del self._sub_layers[str(name)]

    def __len__(self) -> int:
        return len(self._sub_layers)

    def forward(self, input: Any) -> Any:
        for layer in self._sub_layers.values():
            input = layer(input)
        return input


class LayerList(Layer):
    """A list of sublayers, registered as ``"0"``, ``"1"`` ...; iterate it in ``forward``."""

    def __init__(self, sublayers: Optional[Iterable[Layer]] = None) -> None:
        super().__init__()
        if sublayers is not None:
            for i, layer in enumerate(sublayers):
                self.add_sublayer(str(i), layer)

    def _abs_index(self, idx: int) -> int:
        n = len(self)
        if not isinstance(idx, int) or isinstance(idx, bool):
            raise InvalidArgument(f"LayerList: an index must be an int, got {idx!r}")
        if not -n <= idx < n:
            raise OutOfRange(f"index {idx} is out of range, should be an integer in range [{-n}, {n})")
        return idx + n if idx < 0 else idx

    def __getitem__(self, idx: Union[int, slice]) -> Any:
        if isinstance(idx, slice):
            return type(self)(list(self._sub_layers.values())[idx])
        return self._sub_layers[str(self._abs_index(idx))]

    def __setitem__(self, idx: int, sublayer: Layer) -> None:
        setattr(self, str(self._abs_index(idx)), sublayer)

    def __delitem__(self, idx: Union[int, slice]) -> None:
        keys = list(self._sub_layers)
        doomed = keys[idx] if isinstance(idx, slice) else [str(self._abs_index(idx))]
        kept = [layer for key, layer in self._sub_layers.items() if key not in doomed]
        self._sub_layers.clear()
        for i, layer in enumerate(kept):
            self._sub_layers[str(i)] = layer

    def __len__(self) -> int:
        return len(self._sub_layers)

    def __iter__(self) -> Iterator[Layer]:
        return iter(self._sub_layers.values())

    def append(self, sublayer: Layer) -> "LayerList":
        self.add_sublayer(str(len(self)), sublayer)
        return self

    def insert(self, index: int, sublayer: Layer) -> None:
        index = self._abs_index(index)
        for i in range(len(self._sub_layers), index, -1):
            self._sub_layers[str(i)] = self._sub_layers[str(i - 1)]
        self._sub_layers[str(index)] = sublayer

    def extend(self, sublayers: Iterable[Layer]) -> "LayerList":
        for layer in sublayers:
            self.append(layer)
        return self
