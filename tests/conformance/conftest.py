"""The conformance suite runs in its own pytest process: ``NUMBA_ENABLE_CUDASIM=1 pytest tests/conformance``.

numba reads NUMBA_ENABLE_CUDASIM when it is first imported, so this sets it
(unless the environment already says, e.g. ``=0`` on a GPU machine) before
anything imports numba. The suite is collected only when asked for (its
directory, or a file in it, on the command line, or
``REFIMPL_CONFORMANCE=1``): a plain ``pytest`` of the whole tree runs in a
process where the simulator flag may come too late, and CI runs this suite
as a second process (``.ci/run``). With ``REFIMPL_RECORD_LAUNCHES=FILE`` it
also records every kernel launch for ``python -m cuda_backend.compile_check FILE``.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))  # tests/: oracle.py


def _asked_for(config):
    if os.environ.get("REFIMPL_CONFORMANCE") == "1":
        return True
    for arg in config.args:
        path = os.path.abspath(str(arg).split("::")[0])
        if path == HERE or path.startswith(HERE + os.sep):
            return True
    return False


def pytest_ignore_collect(collection_path, config):
    if not _asked_for(config):
        return True
    return None


def pytest_configure(config):
    if _asked_for(config):
        os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
        if os.environ["NUMBA_ENABLE_CUDASIM"] == "1":
            # the simulator's syncthreads waits on a polling thread: switch threads often
            sys.setswitchinterval(0.0005)
        if os.environ.get("REFIMPL_RECORD_LAUNCHES"):  # for python -m cuda_backend.compile_check
            from cuda_backend.compile_check import Recorder
            config._refimpl_recorder = Recorder().__enter__()


def pytest_sessionfinish(session):
    recorder = getattr(session.config, "_refimpl_recorder", None)
    if recorder is not None:
        recorder.save(os.environ["REFIMPL_RECORD_LAUNCHES"])


def pytest_report_header(config):
    if _asked_for(config):
        return f"refimpl conformance: NUMBA_ENABLE_CUDASIM={os.environ.get('NUMBA_ENABLE_CUDASIM')}"
    return None
