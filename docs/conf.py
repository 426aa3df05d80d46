"""Sphinx configuration: MyST markdown, notebooks through myst-nb (never executed), furo theme.

Build:  python -m sphinx -W -b html docs docs/_build/html
The API pages are generated at build time from the docstrings
(``automodule`` for every module, found by ``_ext/refimpl_api.py``);
``tests/test_docs.py`` builds a copy of this folder with warnings as errors.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))      # the repository (refimpl is importable from there)
sys.path.insert(0, os.path.join(HERE, "_ext"))

project = "refimpl"
author = "the refimpl authors"
copyright = "2026, the refimpl authors"
try:
    from refimpl import __version__ as release
except ImportError:  # pragma: no cover - refimpl is importable from the repository
    release = "0.1.0"
version = release

extensions = [
    "myst_nb",                      # MyST markdown + .ipynb (registers myst_parser itself)
    "sphinx.ext.autodoc",
    "refimpl_api",                  # .. refimpl-modules:: (one API page per package)
]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "jupyter_execute", "Thumbs.db", ".DS_Store", "tutorials/data",
                    "**/.ipynb_checkpoints"]

# Notebooks are shown with the outputs stored in them; the test suite runs them.
nb_execution_mode = "off"
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_default_options = {"members": True, "show-inheritance": True, "ignore-module-all": True}
autodoc_member_order = "bysource"
autodoc_typehints = "none"
toc_object_entries = False    # classes and functions stay off the navigation tree (keeps the build fast)
autodoc_mock_imports = ["mpi4py", "numba"]   # optional dependencies: the API pages do not need them

html_theme = "furo"
html_title = f"refimpl {release}"
suppress_warnings = ["myst.header"]   # notebooks start at a level-1 title and may skip levels
