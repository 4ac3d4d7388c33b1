"""Sphinx configuration: numpydoc docstrings, MyST markdown pages, notebooks rendered with their stored outputs.

The example notebooks and benchmark plots live outside ``docs/`` (``examples/``, ``benchmarks/results/``); they
are copied into ``docs/_generated/`` at build time so the docs always show the committed versions.
"""

import shutil
from pathlib import Path

import tuckerkit

ROOT = Path(__file__).resolve().parent.parent
GENERATED = Path(__file__).resolve().parent / "_generated"

project = "tuckerkit"
author = "the tuckerkit developers"
copyright = "2026, the tuckerkit developers"
version = release = tuckerkit.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_nb",
]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "**.ipynb_checkpoints", "_generated/cli_reference.md",  # included by guide/cli
                    "_generated/benchmarks/*.md"]  # result tables: included by benchmarks.md, not pages
templates_path = ["_templates"]

autosummary_generate = True
autodoc_default_options = {"members": True, "inherited-members": False, "show-inheritance": True}
autodoc_typehints = "none"           # the numpydoc Parameters section carries the types
numpydoc_show_class_members = False  # autosummary lists them; avoids duplicate stubs
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

nb_execution_mode = "off"  # notebooks are executed by `make examples` and the tests, and committed with outputs
myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3

html_theme = "pydata_sphinx_theme"
html_title = f"tuckerkit {release}"
html_theme_options = {"show_toc_level": 2, "navigation_with_keys": False, "header_links_before_dropdown": 5}
html_static_path = ["_static"]
html_css_files = ["tuckerkit.css"]
# pages without sub-pages get no left sidebar (it would show an empty "Section Navigation")
html_sidebars = {page: [] for page in ("index", "install", "coming_from", "design", "benchmarks", "search")}


def _copy_generated(app):
    """Bring the committed notebooks and benchmark plots into the source tree of this build."""
    for sub, pattern, src in (("examples", "*.ipynb", ROOT / "examples"),
                              ("benchmarks", "*.png", ROOT / "benchmarks" / "results"),
                              ("benchmarks", "*.md", ROOT / "benchmarks" / "results")):
        dst = GENERATED / sub
        dst.mkdir(parents=True, exist_ok=True)
        for f in sorted(src.glob(pattern)):
            shutil.copy2(f, dst / f.name)


def _write_cli_reference(app):
    """The command-line reference, generated from the typer application (``guide/cli.md`` includes it)."""
    from tuckerkit.cli._reference import reference_markdown

    GENERATED.mkdir(parents=True, exist_ok=True)
    target = GENERATED / "cli_reference.md"
    text = reference_markdown()
    if not target.exists() or target.read_text() != text:  # unchanged: no rebuild of the pages including it
        target.write_text(text)


def _skip_member(app, what, name, obj, skip, options):
    """Hide scikit-learn's generated metadata-routing setters and str/Enum plumbing from the class pages."""
    if name.startswith("set_") and name.endswith("_request"):
        return True
    if name in ("maketrans", "set_output"):
        return True
    return None


def setup(app):
    app.connect("builder-inited", _copy_generated)
    app.connect("builder-inited", _write_cli_reference)
    app.connect("autodoc-skip-member", _skip_member)
smartquotes = False  # "--max-iter" stays two hyphens in the CLI reference and the guides
nb_merge_streams = True  # one output box per cell, not one per print
