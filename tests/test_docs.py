"""The Sphinx site builds with warnings as errors, and has the pages it promises.

The build runs on a copy of ``docs/`` in a temporary directory
(``docs/tutorials`` is a link to ``tutorials/``, copied as files), so the
checkout is left untouched. Notebooks
are rendered from their stored outputs, never executed (``nb_execution_mode
= "off"``); ``test_tutorials.py`` runs them.
"""
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("sphinx")
pytest.importorskip("myst_nb")
pytest.importorskip("furo")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
CONCEPT_PAGES = ["framework", "core", "ops", "static", "optimizer", "executor", "passes",
                 "distributed", "viz_cli", "cuda_backend"]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("docs")
    src, out = tmp / "src", tmp / "html"
    shutil.copytree(DOCS, src, symlinks=False,
                    ignore=shutil.ignore_patterns("_build", "jupyter_execute", ".ipynb_checkpoints"))
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           str(src), str(out)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, f"sphinx -W failed:\n{proc.stderr[-6000:]}"
    return out


def _read(site, page):
    path = site / page
    assert path.is_file(), f"{page} was not built"
    return path.read_text(encoding="utf-8")


def test_concept_page_per_layer_maps_modules_to_paddle_sources(site):
    for name in CONCEPT_PAGES:
        html = _read(site, f"concepts/{name}.html")
        assert "<table" in html and "refimpl/" in html, name
    assert "executor_gc_helper.cc" in _read(site, "concepts/executor.html")


def test_every_refimpl_module_is_documented_in_the_api_reference(site):
    import pkgutil
    import refimpl
    pages = "".join(p.read_text(encoding="utf-8") for p in (site / "api").glob("*.html"))
    missing = [m.name for m in pkgutil.walk_packages(refimpl.__path__, "refimpl.")
               if not m.name.endswith("__main__") and f'id="module-{m.name}"' not in pages]
    assert not missing, f"no API entry for {missing}"
    assert 'id="refimpl.viz.memory.memory_timeline"' in pages   # members come from the docstrings


def test_notebooks_are_rendered_with_their_outputs(site):
    notebooks = sorted(f for f in os.listdir(os.path.join(ROOT, "tutorials")) if f.endswith(".ipynb"))
    assert len(notebooks) >= 8
    for nb in notebooks:
        html = _read(site, f"tutorials/{nb[:-6]}.html")
        assert "all claims hold" in html, nb
    assert "<img" in _read(site, "tutorials/07_pipeline_schedules.html")


def test_performance_and_many_machines_pages(site):
    perf = _read(site, "performance.html")
    assert "2026-11-30" in perf and "mlp_step.py" in perf and "collectives.py" in perf
    multi = _read(site, "many_machines.html")
    assert "hostfile" in multi and "node1:4" in multi and "refimpl.distributed.launch" in multi
