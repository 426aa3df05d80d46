"""Every notebook in ``tutorials/`` runs top to bottom and its closing claims hold.

Each notebook is executed with nbclient in a fresh kernel, from the
tutorials directory (the notebooks read ``data/``), with a per-cell timeout;
a failing assert in any cell fails the test with the cell's traceback. The
notebooks are executed in memory: the files on disk are not rewritten. The
kernel talks over Unix sockets in a temporary folder, not TCP ports, so no
other process that binds ports (mpiexec, say) can take one of its ports
between their choice and its start.
"""
import glob
import os
import tempfile
import time

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
KernelManager = pytest.importorskip("jupyter_client.manager").KernelManager

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TUTORIALS = os.path.join(ROOT, "tutorials")
NOTEBOOKS = sorted(glob.glob(os.path.join(TUTORIALS, "[0-9][0-9]_*.ipynb")))
CELL_TIMEOUT = 120   # seconds per cell
BUDGET = 60          # seconds per notebook (they aim for well under 20)


def test_there_are_notebooks_one_per_idea():
    names = [os.path.basename(p)[:2] for p in NOTEBOOKS]
    assert names[:8] == [f"{i:02d}" for i in range(1, 9)], names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_notebook_runs_and_its_claims_hold(path):
    if "gpu_backend" in path:
        pytest.importorskip("numba", reason="the GPU notebook needs numba (the cuda extra)")
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "assert" in code[-1].source, "a notebook ends with cells that assert its claims"
    with tempfile.TemporaryDirectory() as sockets:  # (a short path: Unix socket paths are limited to ~100 bytes)
        km = KernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(sockets, "k"))
        client = nbclient.NotebookClient(nb, km=km, timeout=CELL_TIMEOUT, resources={"metadata": {"path": TUTORIALS}})
        start = time.perf_counter()
        client.execute()
        elapsed = time.perf_counter() - start
    outputs = "".join(o.get("text", "") for o in code[-1].outputs if o.get("output_type") == "stream")
    assert "all claims hold" in outputs
    assert elapsed < BUDGET, f"{os.path.basename(path)} took {elapsed:.1f} s"
