"""The documentation's own style sheet (``docs/_static/tables.css``): wide tables scroll
sideways inside the content column (the Results and Elk pages have a dozen columns).

The sheet's rules select the ``div.table-wrapper`` furo puts around every table; a site built
here with furo and myst-parser, as ``docs/conf.py`` builds the real one, shows that a wide
markdown table gets that wrapper and that the page loads the sheet.
"""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _rules(css: str) -> dict[str, dict[str, str]]:
    """selector -> {property: value} of a plain style sheet (comments dropped)."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    rules: dict[str, dict[str, str]] = {}
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css):
        declarations = dict(
            (name.strip(), value.strip())
            for name, _, value in (d.partition(":") for d in body.split(";") if d.strip()))
        for selector in selectors.split(","):
            rules.setdefault(" ".join(selector.split()), {}).update(declarations)
    return rules


def test_conf_registers_the_table_sheet():
    conf = runpy.run_path(str(DOCS / "conf.py"))
    assert "tables.css" in conf["html_css_files"]
    for name in conf["html_css_files"]:
        assert any((DOCS / d / name).is_file() for d in conf["html_static_path"]), name


def test_wide_tables_scroll_inside_the_column():
    rules = _rules((DOCS / "_static" / "tables.css").read_text())
    wrapper = rules["article .table-wrapper"]
    assert wrapper["overflow-x"] == "auto" and wrapper["max-width"] == "100%"
    # furo gives the wrapper width: 100% and padding: with content-box sizing it is wider
    # than the column by its padding
    assert wrapper["box-sizing"] == "border-box"
    assert rules["article table.docutils td.text-right"]["white-space"] == "nowrap"


def test_furo_wraps_a_wide_markdown_table_as_the_sheet_expects(tmp_path):
    from sphinx.cmd.build import build_main

    source = tmp_path / "src"
    (source / "_static").mkdir(parents=True)
    (source / "_static" / "tables.css").write_text((DOCS / "_static" / "tables.css").read_text())
    (source / "conf.py").write_text(
        'extensions = ["myst_parser"]\nhtml_theme = "furo"\nhtml_static_path = ["_static"]\n'
        'html_css_files = ["tables.css"]\n')
    columns = [f"column {i}" for i in range(24)]
    (source / "index.md").write_text(
        "# Wide\n\n| " + " | ".join(columns) + " |\n|" + "---:|" * len(columns) + "\n| "
        + " | ".join(f"{1234.5 * i:,.1f} ms" for i in range(len(columns))) + " |\n")
    assert build_main(["-b", "html", "-q", "-W", str(source), str(tmp_path / "out")]) == 0
    page = (tmp_path / "out" / "index.html").read_text()
    assert re.search(r'<link[^>]+href="_static/tables\.css', page)
    assert re.search(r'<article role="main"[^>]*>', page)
    wrapper = re.search(r'<div class="([^"]*)">\s*<table class="docutils', page)
    assert wrapper and "table-wrapper" in wrapper.group(1).split()
    assert page.count('<td class="text-right">') == len(columns)
