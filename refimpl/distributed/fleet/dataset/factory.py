"""``paddle.base.DatasetFactory``: the 1.x data-set API with public setters (``set_use_var`` ...).

Mirrors ``python/paddle/base/dataset.py`` (Paddle 3.3.1), which older static
scripts still use: ``DatasetFactory().create_dataset("InMemoryDataset")``
and then ``set_use_var``, ``set_batch_size``, ``set_thread``,
``set_pipe_command``, ``set_filelist``, ``load_into_memory`` ...; ``desc()``
gives the settings as text. Here these classes are the 2.x classes of
``dataset.py`` with those public names added, so both APIs read files the
same way and the Executor takes either. (``paddle.base.dataset`` re-exports
this module.) The setters of Paddle's classes that refimpl lacks (the
parameter-server and graph ones: ``set_parse_ins_id``, ``set_merge_by_lineid``
...) are known by name and raise :class:`Unimplemented` naming the method.
"""
from __future__ import annotations

from typing import Any, FrozenSet, List

from refimpl.core.errors import InvalidArgument, Unimplemented

from . import dataset as _fleet

__all__ = ["DatasetFactory"]

# Paddle 3.3.1's base.dataset methods that refimpl does not provide (they need its C++ feed or a cluster)
_BASE_MISSING = frozenset({"set_so_parser_name", "set_rank_offset", "set_fea_eval", "set_pv_batch_size"})
_IN_MEMORY_MISSING = _BASE_MISSING | {
    "set_feed_type", "set_parse_ins_id", "set_parse_content", "set_parse_logkey", "set_merge_by_sid",
    "set_enable_pv_merge", "preprocess_instance", "set_current_phase", "postprocess_instance",
    "set_fleet_send_sleep_seconds", "set_merge_by_lineid", "set_generate_unique_feasigns",
    "generate_local_tables_unlock", "set_date", "get_pv_data_size", "get_epoch_finish", "clear_sample_state",
    "set_graph_config", "set_pass_id", "get_pass_id", "dump_walk_path", "dump_sample_neighbors"}


class _LegacySetters(_fleet.DatasetBase):
    """The public setters of Paddle's ``base.dataset.DatasetBase`` (a mixin before a 2.x data set)."""

    _missing: FrozenSet[str] = _BASE_MISSING

    def __getattr__(self, name: str) -> Any:  # only for names not found: Paddle's methods refimpl lacks
        if name in type(self)._missing:
            raise Unimplemented(f"{type(self).__name__}.{name} is not implemented by refimpl")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def set_pipe_command(self, pipe_command: str) -> None:
        self._set_pipe_command(pipe_command)

    def set_batch_size(self, batch_size: int) -> None:
        self._set_batch_size(batch_size)

    def set_thread(self, thread_num: int) -> None:
        self._set_thread(thread_num)

    def set_use_var(self, var_list: List[Any]) -> None:
        self._set_use_var(var_list)

    def set_input_type(self, input_type: int) -> None:
        self._set_input_type(input_type)

    def set_hdfs_config(self, fs_name: str, fs_ugi: str) -> None:
        self._set_hdfs_config(fs_name, fs_ugi)

    def set_download_cmd(self, download_cmd: str) -> None:
        self._set_download_cmd(download_cmd)

    def desc(self) -> str:
        return self._desc()


class InMemoryDataset(_LegacySetters, _fleet.InMemoryDataset):
    """``base.DatasetFactory().create_dataset("InMemoryDataset")``."""

    _missing = _IN_MEMORY_MISSING

    def set_queue_num(self, queue_num: int) -> None:
        pass  # Paddle's channel count: refimpl has no channels

    def set_fleet_send_batch_size(self, fleet_send_batch_size: int = 1024) -> None:
        pass  # only for global_shuffle across trainers


class QueueDataset(_LegacySetters, _fleet.QueueDataset):
    """``base.DatasetFactory().create_dataset("QueueDataset")`` (the default)."""

    def local_shuffle(self) -> None:
        raise Unimplemented("QueueDataset does not support local shuffle, please use InMemoryDataset for "
                            "local_shuffle")


class DatasetFactory:
    """Creates a data set by class name: "QueueDataset" (the default) or "InMemoryDataset"."""

    def create_dataset(self, datafeed_class: str = "QueueDataset") -> Any:
        kinds = {"QueueDataset": QueueDataset, "InMemoryDataset": InMemoryDataset}
        if datafeed_class not in kinds:
            if datafeed_class in ("FileInstantDataset", "BoxPSDataset"):
                raise Unimplemented(f"DatasetFactory.create_dataset: {datafeed_class} is not implemented by "
                                    f"refimpl (QueueDataset and InMemoryDataset are)")
            raise InvalidArgument(f"datafeed class {datafeed_class} does not exist")
        return kinds[datafeed_class]()
