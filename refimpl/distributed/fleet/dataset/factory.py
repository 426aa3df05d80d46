"""``paddle.base.DatasetFactory``: the 1.x data-set API with public setters (``set_use_var`` ...).

Mirrors ``python/paddle/base/dataset.py`` (Paddle 3.3.1), which older static
scripts still use: ``DatasetFactory().create_dataset("InMemoryDataset")``
and then ``set_use_var``, ``set_batch_size``, ``set_thread``,
``set_pipe_command``, ``set_filelist``, ``load_into_memory`` ...; ``desc()``
gives the settings as text. Here these classes are the 2.x classes of
``dataset.py`` with those public names added, so both APIs read files the
same way and the Executor takes either. (``paddle.base.dataset`` re-exports
this module.)
"""
from __future__ import annotations

from typing import Any, List

from refimpl.core.errors import InvalidArgument, Unimplemented

from . import dataset as _fleet

__all__ = ["DatasetFactory"]


class _LegacySetters(_fleet.DatasetBase):
    """The public setters of Paddle's ``base.dataset.DatasetBase`` (a mixin before a 2.x data set)."""

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
