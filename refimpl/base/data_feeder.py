"""``paddle.base.DataFeeder``: turn a reader's samples into an Executor feed.

Mirrors ``DataFeeder`` and ``DataToDenseTensorConverter`` of
``python/paddle/base/data_feeder.py`` (Paddle 3.3.1, legacy IR): for each
variable of ``feed_list`` (a Variable or a name in block 0 of ``program``)
the slots of every sample are gathered into one array of the variable's
dtype; when that array's rank differs from the variable's, it is reshaped
to the variable's shape (the one ``-1`` batch dim taking what is left; a
shape with two or more ``-1`` is not reshaped). ``feed`` returns
``{name: DenseTensor}``, as Paddle's does (``np.array(t)`` reads one).

Differences: sequences (``lod_level > 0``) raise Unimplemented naming the
variable when the feeder is made, as refimpl's tensors carry no LoD; the
checks Paddle makes with ``assert`` / ``TypeError`` / ``ValueError`` raise
InvalidArgument (a ValueError) here.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence

import numpy as np

from refimpl.core.dtypes import convert_dtype
from refimpl.core.errors import InvalidArgument, Unimplemented
from refimpl.core.tensor import DenseTensor
from refimpl.framework import Program, Variable, default_main_program

__all__ = ["DataFeeder"]


class DataFeeder:
    """Paddle's ``base.DataFeeder(feed_list, place, program=None)``."""

    def __init__(self, feed_list: Sequence[Any], place: Any, program: Optional[Program] = None) -> None:
        self.place = place
        program = default_main_program() if program is None else program
        self.feed_names: List[str] = []
        self.feed_dtypes: List[str] = []
        self.feed_shapes: List[Optional[List[int]]] = []
        self.feed_lod_level: List[int] = []
        for var in feed_list:
            if isinstance(var, str):
                var = program.block(0).var(var)
            if not isinstance(var, Variable):
                raise InvalidArgument(f"DataFeeder: feed_list should contain Variables or their names, "
                                      f"got {type(var).__name__} {var!r}")
            if var.lod_level:
                raise Unimplemented(f"DataFeeder: variable {var.name!r} has lod_level {var.lod_level}; refimpl "
                                    f"feeds dense tensors only (lod_level 0)")
            self.feed_names.append(var.name)
            self.feed_dtypes.append(convert_dtype(var.dtype))
            self.feed_shapes.append(_reshape_target(var.shape))
            self.feed_lod_level.append(0)

    def feed(self, iterable: Iterable[Sequence[Any]]) -> Dict[str, DenseTensor]:
        """``{name: DenseTensor}``: slot k of every sample of ``iterable``, batched for ``feed_list[k]``."""
        columns: List[list] = [[] for _ in self.feed_names]
        for sample in iterable:
            if len(sample) != len(columns):
                raise InvalidArgument(f"DataFeeder.feed: the number of fields in data ({len(sample)}) does not "
                                      f"match len(feed_list) ({len(columns)}) {self.feed_names}")
            for column, slot in zip(columns, sample):
                column.append(slot)
        return {name: DenseTensor(self._batch(name, column, dtype, shape), self.place)
                for name, column, dtype, shape in zip(self.feed_names, columns, self.feed_dtypes, self.feed_shapes)}

    @staticmethod
    def _batch(name: str, column: list, dtype: str, shape: Optional[List[int]]) -> np.ndarray:
        try:
            arr = np.array(column, dtype=dtype)
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"DataFeeder.feed: the data for {name!r} cannot become a {dtype} array: "
                                  f"{exc}") from None
        if shape and arr.ndim != len(shape):
            try:
                arr = arr.reshape(shape)
            except ValueError:
                raise InvalidArgument(f"DataFeeder.feed: reshape error for {name!r}: what is defined in the data "
                                      f"layer is {shape}, but receive {list(arr.shape)}") from None
        return arr


def _reshape_target(shape: Optional[Sequence[int]]) -> Optional[List[int]]:
    """The shape a batch is reshaped to: the variable's, or None when it has more than one unknown dim."""
    dims = [int(d) for d in shape or ()]
    return None if sum(d < 0 for d in dims) > 1 else dims
