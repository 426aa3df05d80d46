"""``paddle.distributed.InMemoryDataset`` / ``QueueDataset``: MultiSlot text files for ``train_from_dataset``.

Mirrors ``python/paddle/distributed/fleet/dataset/dataset.py`` (Paddle 3.3.1):
``init(batch_size, thread_num, use_var, pipe_command, ...)``, the ``_set_*``
setters it calls, ``set_filelist``; ``InMemoryDataset`` adds
``load_into_memory``, ``preload_into_memory`` / ``wait_preload_done``,
``local_shuffle``, ``release_memory``, ``get_memory_data_size`` and
``get_shuffle_data_size``. The lines are parsed by ``multi_slot.py``.

What the Executor uses (``refimpl/executor/dataset_runner.py`` takes any
object with these): ``thread_num``; ``_prepare_to_run()``, which checks the
settings; ``_use_var_names()``, the fed variables;
``_reader_batches(threads)``, one iterable of feeds ``{name: ndarray}`` per
reader thread (``threads``: the trainer's thread count, which an
``InMemoryDataset`` adapts its readers to and a ``QueueDataset`` ignores, as
Paddle's ``_dynamic_adjust_before_train``); and ``_finish_to_run()``.

How the data is split: a ``QueueDataset`` streams its files, reader ``i``
of ``n`` reading files ``i, i + n, ...`` (Paddle's readers take the next
file from a shared queue, so which reader gets which file depends on timing;
here it does not), a reader's batches running on from one file into the
next; an ``InMemoryDataset`` holds every instance in file-list order
(``local_shuffle`` permutes them, drawing from the global random state that
``paddle.seed`` sets) and cuts them into batches in that order, batch ``j``
going to reader ``j % n`` (Paddle's readers take the next batch from one
shared channel: the same batches, each reader's share depending on timing).

Differences from Paddle: a file that is missing or malformed is an error,
not an empty file or an abort; training on an ``InMemoryDataset`` that
holds nothing (never loaded, or released) is :class:`PreconditionNotMet`,
where Paddle trains on nothing; settings that need a cluster (HDFS,
``global_shuffle`` across trainers, ``slots_shuffle``) are
:class:`Unimplemented`; unknown ``init`` settings are
:class:`InvalidArgument` (Paddle ignores them); a second
``preload_into_memory`` before ``wait_preload_done`` is
:class:`PreconditionNotMet`. ``get_memory_data_size(fleet)`` sums over the
trainers through ``fleet.util.all_reduce`` (Paddle goes through the role
maker's ``all_reduce_worker``, the same sum).
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import numpy as np

from refimpl.core import random as rng
from refimpl.core.errors import InvalidArgument, PreconditionNotMet, Unimplemented

from .multi_slot import Slot, batches, make_batch, read_instances, slots_from_vars

__all__ = ["DatasetBase", "InMemoryDataset", "QueueDataset"]

_BASE_SETTINGS = ("batch_size", "thread_num", "use_var", "pipe_command", "input_type", "fs_name", "fs_ugi",
                  "download_cmd")
# InMemoryDataset settings that only matter to Paddle's C++ feed or to a cluster: accepted, not used
_IN_MEMORY_EXTRA = ("data_feed_type", "queue_num", "merge_size", "parse_ins_id", "parse_content",
                    "fleet_send_batch_size", "fleet_send_sleep_seconds", "fea_eval", "candidate_size")


def _positive_int(value: Any, api: str, what: str) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
        raise InvalidArgument(f"{api}: {what} must be a positive int, got {value!r}")
    return int(value)


class DatasetBase:
    """Settings shared by both data sets: batch size, reader threads, slots, pipe command, file list."""

    def __init__(self) -> None:
        self.batch_size = 1
        self.thread_num = 1
        self.pipe_command = "cat"
        self.input_type: Optional[int] = None  # None: never set (Paddle's desc then leaves it out)
        self.filelist: List[str] = []
        self.slots: List[Slot] = []
        self.use_ps_gpu = False

    def init(self, batch_size: int = 1, thread_num: int = 1, use_var: Sequence[Any] = (),
             pipe_command: str = "cat", input_type: int = 0, fs_name: str = "", fs_ugi: str = "",
             download_cmd: str = "cat") -> None:
        """Set everything at once (Paddle: call it once per data set)."""
        self._set_batch_size(batch_size)
        self._set_thread(thread_num)
        self._set_use_var(list(use_var))
        self._set_pipe_command(pipe_command)
        self._set_input_type(input_type)
        self._set_hdfs_config(fs_name, fs_ugi)
        self._set_download_cmd(download_cmd)

    def _set_pipe_command(self, pipe_command: str) -> None:
        if not isinstance(pipe_command, str) or not pipe_command.strip():
            raise InvalidArgument(f"dataset: pipe_command must be a command line, got {pipe_command!r}")
        self.pipe_command = pipe_command

    def _set_batch_size(self, batch_size: int) -> None:
        self.batch_size = _positive_int(batch_size, "dataset", "batch_size")

    def _set_thread(self, thread_num: int) -> None:
        self.thread_num = _positive_int(thread_num, "dataset", "thread_num")

    def _set_use_var(self, var_list: Sequence[Any]) -> None:
        self.slots = slots_from_vars(var_list)

    def _set_input_type(self, input_type: int) -> None:
        if input_type not in (0, 1):
            raise InvalidArgument(f"dataset: input_type must be 0 (one instance a line) or 1, got {input_type!r}")
        if input_type == 1:
            raise Unimplemented("dataset: input_type=1 (one batch a line) is not implemented by refimpl")
        self.input_type = input_type

    def _set_hdfs_config(self, fs_name: str, fs_ugi: str) -> None:
        if fs_name or fs_ugi:
            raise Unimplemented("dataset: HDFS file systems (fs_name / fs_ugi) are not implemented by refimpl; "
                                "give local files")

    def _set_download_cmd(self, download_cmd: str) -> None:
        if download_cmd != "cat":
            raise Unimplemented(f"dataset: download_cmd {download_cmd!r}: only local files ('cat') are "
                                f"implemented by refimpl")

    def set_filelist(self, filelist: List[str]) -> None:
        """The files this worker reads (checked to exist when they are read)."""
        if not isinstance(filelist, (list, tuple)) or not all(isinstance(f, str) for f in filelist):
            raise InvalidArgument(f"dataset.set_filelist: expects a list of file names, got {filelist!r}")
        self.filelist = list(filelist)

    def _use_var_names(self) -> List[str]:
        return [s.name for s in self.slots]

    def _prepare_to_run(self) -> None:
        """Check that the data set can be read: variables to feed, files to read."""
        if not self.slots:
            raise PreconditionNotMet(f"{type(self).__name__}: no variables to feed; pass use_var to init()")
        if not self.filelist:
            raise PreconditionNotMet(f"{type(self).__name__}: the file list is empty; call set_filelist()")

    def _finish_to_run(self) -> None:
        pass

    def _desc(self) -> str:
        """The settings as Paddle prints its ``DataFeedDesc`` protobuf (text format)."""
        lines = [f'name: "{self._feed_name}"', f"batch_size: {self.batch_size}", "multi_slot_desc {"]
        for s in self.slots:
            lines += ["  slots {", f'    name: "{s.name}"', f'    type: "{s.type}"', "    is_dense: true",
                      "    is_used: true"] + [f"    shape: {d}" for d in s.shape] + ["  }"]
        lines += ["}", f'pipe_command: "{self.pipe_command}"']
        if self.input_type is not None:
            lines.append(f"input_type: {self.input_type}")
        return "\n".join(lines) + "\n"

    _feed_name = "MultiSlotDataFeed"


class QueueDataset(DatasetBase):
    """Streams its files: reader i of n reads files i, i + n, ... in turn."""

    # Paddle's QueueDataset.init takes keywords only, narrowing DatasetBase.init: kept as Paddle's API
    def init(self, **kwargs: Any) -> None:  # type: ignore[override]  # as Paddle's
        unknown = set(kwargs) - set(_BASE_SETTINGS)
        if unknown:
            raise InvalidArgument(f"QueueDataset.init: unknown settings {sorted(unknown)} (known: "
                                  f"{list(_BASE_SETTINGS)})")
        super().init(**kwargs)

    def _reader_batches(self, threads: int = 0) -> List[Iterator[Dict[str, np.ndarray]]]:
        n = max(1, min(self.thread_num, len(self.filelist)))  # at most one reader a file, as Paddle

        def instances(files):
            for path in files:
                yield from read_instances(path, self.slots, self.pipe_command)
        return [batches(instances(self.filelist[i::n]), self.slots, self.batch_size) for i in range(n)]


class InMemoryDataset(DatasetBase):
    """Loads every instance into memory first; can shuffle them before training."""

    _feed_name = "MultiSlotInMemoryDataFeed"

    def __init__(self) -> None:
        super().__init__()
        self._memory: List[tuple] = []
        self._preload: Optional[threading.Thread] = None
        self._preload_error: Optional[BaseException] = None

    # Paddle's InMemoryDataset.init takes keywords only (and more of them), narrowing DatasetBase.init
    def init(self, **kwargs: Any) -> None:  # type: ignore[override]  # as Paddle's
        unknown = set(kwargs) - set(_BASE_SETTINGS) - set(_IN_MEMORY_EXTRA)
        if unknown:
            raise InvalidArgument(f"InMemoryDataset.init: unknown settings {sorted(unknown)} (known: "
                                  f"{list(_BASE_SETTINGS + _IN_MEMORY_EXTRA)})")
        super().init(**{k: v for k, v in kwargs.items() if k in _BASE_SETTINGS})

    def update_settings(self, **kwargs: Any) -> None:
        """Change some settings after ``init`` (the same names, checked as ``init`` checks them)."""
        setters: Dict[str, Callable[[Any], None]] = {"batch_size": self._set_batch_size,
                                                     "thread_num": self._set_thread,
                                                     "use_var": self._set_use_var,
                                                     "pipe_command": self._set_pipe_command,
                                                     "input_type": self._set_input_type,
                                                     "download_cmd": self._set_download_cmd}
        for key in kwargs:
            if key not in _IN_MEMORY_EXTRA and key not in _BASE_SETTINGS:
                raise InvalidArgument(f"InMemoryDataset.update_settings: unknown setting {key!r}")
        for key, value in kwargs.items():
            if key in setters:
                setters[key](value)
        if "fs_name" in kwargs or "fs_ugi" in kwargs:
            self._set_hdfs_config(kwargs.get("fs_name", ""), kwargs.get("fs_ugi", ""))

    def load_into_memory(self, is_shuffle: bool = False) -> None:
        """Read every file (``thread_num`` files at a time) and keep the instances in file-list order."""
        self._prepare_to_run()
        with ThreadPoolExecutor(max_workers=max(1, min(self.thread_num, len(self.filelist)))) as pool:
            parts = list(pool.map(lambda p: list(read_instances(p, self.slots, self.pipe_command)),
                                  self.filelist))
        self._memory = [inst for part in parts for inst in part]
        if is_shuffle:
            self.local_shuffle()

    def preload_into_memory(self, thread_num: Optional[int] = None) -> None:
        """Start loading in the background; ``wait_preload_done`` waits for it (and raises its error)."""
        if self._preload is not None:
            raise PreconditionNotMet("InMemoryDataset.preload_into_memory: a preload is already running; call "
                                     "wait_preload_done() before preloading again")
        if thread_num is not None:
            self._set_thread(thread_num)
        self._preload_error = None

        def load():
            try:
                self.load_into_memory()
            except BaseException as exc:  # handed to wait_preload_done
                self._preload_error = exc
        self._preload = threading.Thread(target=load, name="InMemoryDataset.preload", daemon=True)
        self._preload.start()

    def wait_preload_done(self) -> None:
        if self._preload is None:
            raise PreconditionNotMet("InMemoryDataset.wait_preload_done: preload_into_memory was not called")
        self._preload.join()
        self._preload = None
        if self._preload_error is not None:
            raise self._preload_error

    def local_shuffle(self) -> None:
        """Permute the instances in memory (reproducible after ``paddle.seed``)."""
        order = rng.next_generator().permutation(len(self._memory))
        self._memory = [self._memory[i] for i in order]

    def global_shuffle(self, fleet: Any = None, thread_num: int = 12) -> None:
        """On one trainer a global shuffle is a local one; across trainers it is not implemented."""
        if fleet is not None and fleet.worker_num() > 1:
            raise Unimplemented("InMemoryDataset.global_shuffle across trainers is not implemented by refimpl")
        self.local_shuffle()

    def slots_shuffle(self, slots: List[str]) -> None:
        raise Unimplemented("InMemoryDataset.slots_shuffle is not implemented by refimpl")

    def release_memory(self) -> None:
        self._memory = []

    def get_memory_data_size(self, fleet: Any = None) -> int:
        """How many instances are in memory: this trainer's, or (``fleet`` given) all trainers' together."""
        return _sum_over_trainers(len(self._memory), fleet)

    def get_shuffle_data_size(self, fleet: Any = None) -> int:
        """As :meth:`get_memory_data_size` (refimpl's shuffles keep every instance on its trainer)."""
        return _sum_over_trainers(len(self._memory), fleet)

    def _reader_batches(self, threads: int = 0) -> List[Iterator[Dict[str, np.ndarray]]]:
        if not self._memory:
            raise PreconditionNotMet("InMemoryDataset holds no instances: call load_into_memory() before "
                                     "train_from_dataset (and not after release_memory())")
        n, size, memory = threads if threads > 0 else self.thread_num, self.batch_size, self._memory

        def reader(i):
            for start in range(i * size, len(memory), n * size):
                yield make_batch(memory[start:start + size], self.slots)
        return [reader(i) for i in range(n)]


def _sum_over_trainers(count: int, fleet: Any) -> int:
    """``count`` summed over the trainers through ``fleet.util.all_reduce`` (``fleet``: None for this one)."""
    if fleet is None:
        return count
    util = getattr(fleet, "util", None)  # the fleet module, as Paddle's examples pass it
    if util is None:  # a Fleet instance: the module's util follows it
        from ..base.util_factory import FleetUtil
        util = FleetUtil(fleet)
    return int(np.asarray(util.all_reduce(np.array([count]), "sum")).reshape(-1)[0])
