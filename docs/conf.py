"""Sphinx configuration of the tvm_icca documentation (``make docs``).

The stack is TVM's: autodoc with numpydoc-style docstrings (read by Sphinx's own napoleon),
sphinx-gallery for the tutorials in ``tutorials/``, intersphinx, and furo as the theme. Pages
generated from the code (hardware presets, the metric glossary, the CLI reference, Results)
are built from it at build time by the small extensions in ``_ext/``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(DOCS / "_ext"))
# the checkout's packages, also when the docs are built without an editable install
sys.path.insert(0, str(ROOT))

import tvm_icca  # noqa: E402  (after the path above)

project = "tvm_icca"
author = "the tvm_icca developers"
copyright = "the tvm_icca developers"  # noqa: A001  (Sphinx's name)
release = tvm_icca.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "sphinx_gallery.gen_gallery",
    "sphinxarg.ext",
    "myst_parser",
    # docs/_ext: generated pages and checks
    "hardware_presets",
    "metric_glossary",
    "results_pages",
    "api_coverage",
    "error_reference",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "**/sg_execution_times.rst", "sg_execution_times.rst"]
templates_path: list[str] = []

# -- docstrings: numpydoc style only ---------------------------------------------------------
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"show-inheritance": True}

# -- intersphinx -----------------------------------------------------------------------------
# Off unless TVM_ICCA_DOCS_INTERSPHINX=1: the inventories are downloaded at build time, and
# a build without network access (CI may run offline) would warn on each, which -W turns
# into a failure. With it set, references to TVM, numpy and Python link to their docs.
if os.environ.get("TVM_ICCA_DOCS_INTERSPHINX") == "1":
    intersphinx_mapping = {
        "python": ("https://docs.python.org/3", None),
        "numpy": ("https://numpy.org/doc/stable", None),
        "tvm": ("https://tvm.apache.org/docs", None),
    }
else:
    intersphinx_mapping = {}

# -- tutorials -------------------------------------------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "tutorials"),
    "gallery_dirs": "tutorials",  # generated under docs/, not tracked
    # run every tutorial (the default runs only plot_*.py) so its output is on the page
    "filename_pattern": r".*\.py$",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    # a tutorial that raises fails the build
    "abort_on_example_error": True,
    "show_memory": False,
    # the tutorials run side by side, one per core (joblib, the docs extra); each runs in its
    # own worker process, as it would in a user's interpreter
    "parallel": (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                 else os.cpu_count() or 1),
}

# -- HTML ------------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"tvm_icca {release}"
html_static_path = ["_static"]
# wide tables scroll inside the content column (the Results and Elk pages)
html_css_files = ["tables.css"]
myst_heading_anchors = 3
