"""Every notebook in ``tutorials/`` runs top to bottom and its closing claims hold.

Each notebook is executed with nbclient in a fresh kernel, from the
tutorials directory (the notebooks read ``data/``), with a per-cell timeout;
a failing assert in any cell fails the test with the cell's traceback. The
notebooks are executed in memory: the files on disk are not rewritten.
"""
import glob
import os
import time

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

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
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                                     resources={"metadata": {"path": TUTORIALS}})
    start = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - start
    outputs = "".join(o.get("text", "") for o in code[-1].outputs if o.get("output_type") == "stream")
    assert "all claims hold" in outputs
    assert elapsed < BUDGET, f"{os.path.basename(path)} took {elapsed:.1f} s"
