"""File systems for fleet jobs: ``FS`` (the interface), ``LocalFS`` and ``HDFSClient``.

Mirrors ``paddle/distributed/fleet/utils/fs.py`` of Paddle 3.3.1. ``LocalFS``
answers as Paddle's does: ``ls_dir`` gives ``([subdirs], [files])`` (empty
lists for a missing path), ``delete`` of a missing path does nothing,
``touch`` / ``mv`` raise ``FSFileExistsError`` / ``FSFileNotExistsError``,
and ``need_upload_download()`` is False. Difference: ``HDFSClient`` (a
wrapper around the ``hadoop fs`` shell) is not implemented: making one
raises ``Unimplemented``; ``mkdirs`` on a file raises ``InvalidArgument``
(also Paddle's ``AssertionError``) naming the path.
"""
from __future__ import annotations

import os
import shutil
from typing import Any, List, NoReturn, Optional, Tuple

from refimpl.core.errors import Unimplemented

from ..base.compat_errors import InvalidArgumentAssertion


class ExecuteError(Exception):
    """A file-system command failed."""


class FSFileExistsError(Exception):
    """The target path exists already."""


class FSFileNotExistsError(Exception):
    """The source path does not exist."""


class FSTimeOut(Exception):
    """A file-system command ran out of time."""


class FSShellCmdAborted(ExecuteError):
    """A file-system shell command was aborted."""


class FS:
    """The file-system interface fleet utilities take (every method is abstract)."""

    def _abstract(self, name: str) -> NoReturn:
        raise NotImplementedError(f"{type(self).__name__}.{name} is not implemented")

    def ls_dir(self, fs_path: str) -> Tuple[List[str], List[str]]: self._abstract("ls_dir")
    def is_file(self, fs_path: str) -> bool: self._abstract("is_file")
    def is_dir(self, fs_path: str) -> bool: self._abstract("is_dir")
    def is_exist(self, fs_path: str) -> bool: self._abstract("is_exist")
    def upload(self, local_path: str, fs_path: str) -> None: self._abstract("upload")
    def download(self, fs_path: str, local_path: str) -> None: self._abstract("download")
    def mkdirs(self, fs_path: str) -> None: self._abstract("mkdirs")
    def delete(self, fs_path: str) -> None: self._abstract("delete")
    def need_upload_download(self) -> bool: self._abstract("need_upload_download")
    def rename(self, fs_src_path: str, fs_dst_path: str) -> None: self._abstract("rename")
    def mv(self, fs_src_path: str, fs_dst_path: str, overwrite: bool = False,
           test_exists: bool = False) -> None: self._abstract("mv")
    def upload_dir(self, local_dir: str, dest_dir: str) -> None: self._abstract("upload_dir")
    def list_dirs(self, fs_path: str) -> List[str]: self._abstract("list_dirs")
    def touch(self, fs_path: str, exist_ok: bool = True) -> None: self._abstract("touch")
    def cat(self, fs_path: Optional[str] = None) -> str: self._abstract("cat")


class LocalFS(FS):
    """The local disk as an ``FS``."""

    def ls_dir(self, fs_path: str) -> Tuple[List[str], List[str]]:
        """The subdirectories and the files directly under ``fs_path`` (two lists)."""
        if not self.is_exist(fs_path):
            return [], []
        dirs, files = [], []
        for name in os.listdir(fs_path):
            (dirs if os.path.isdir(os.path.join(fs_path, name)) else files).append(name)
        return dirs, files

    def list_dirs(self, fs_path: str) -> List[str]:
        return self.ls_dir(fs_path)[0]

    def mkdirs(self, fs_path: str) -> None:
        if os.path.isfile(fs_path):
            raise InvalidArgumentAssertion(f"LocalFS.mkdirs: {fs_path} is already a file")
        os.makedirs(fs_path, exist_ok=True)

    def rename(self, fs_src_path: str, fs_dst_path: str) -> None:
        os.rename(fs_src_path, fs_dst_path)

    def delete(self, fs_path: str) -> None:
        """Remove a file or a directory tree; a missing path is no error."""
        if not self.is_exist(fs_path):
            return
        if os.path.isfile(fs_path):
            os.remove(fs_path)
        else:
            shutil.rmtree(fs_path)

    def need_upload_download(self) -> bool:
        return False

    def is_file(self, fs_path: str) -> bool:
        return os.path.isfile(fs_path)

    def is_dir(self, fs_path: str) -> bool:
        return os.path.isdir(fs_path)

    def is_exist(self, fs_path: str) -> bool:
        return os.path.exists(fs_path)

    def touch(self, fs_path: str, exist_ok: bool = True) -> None:
        if self.is_exist(fs_path):
            if exist_ok:
                return
            raise FSFileExistsError(fs_path)
        with open(fs_path, "a"):
            pass

    def mv(self, src_path: str, dst_path: str, overwrite: bool = False, test_exists: bool = False) -> None:
        if not self.is_exist(src_path):
            raise FSFileNotExistsError(src_path)
        if overwrite and self.is_exist(dst_path):
            self.delete(dst_path)
        if self.is_exist(dst_path):
            raise FSFileExistsError(dst_path)
        self.rename(src_path, dst_path)


class HDFSClient(FS):
    """Paddle's ``hadoop fs`` wrapper; not available in refimpl."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise Unimplemented("paddle.distributed.fleet.utils.HDFSClient (the `hadoop fs` shell wrapper) is not "
                            "implemented by refimpl; use LocalFS")


__all__ = ["FS", "LocalFS", "HDFSClient", "ExecuteError", "FSFileExistsError", "FSFileNotExistsError",
           "FSTimeOut", "FSShellCmdAborted"]
