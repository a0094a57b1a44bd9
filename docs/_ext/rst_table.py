"""One helper for the generators: rows of text as a reStructuredText ``list-table`` parsed in place.

Directives that build a table from project data (hardware presets, metrics) emit it through
:func:`parse_table`, so every generated table looks the same and escapes cells the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles


def parse_table(directive: SphinxDirective, title: str, header: Sequence[str],
                rows: Sequence[Sequence[str]], widths: Sequence[int] | None = None) -> list[nodes.Node]:
    """Parse ``rows`` under ``header`` as a ``list-table`` in ``directive``'s document.

    Cells are reStructuredText (inline markup allowed); a cell's line breaks are joined, as a
    list-table cell is one paragraph here.
    """
    source = directive.get_source_info()[0]
    lines = [f".. list-table:: {title}", "   :header-rows: 1"]
    if widths:
        lines.append("   :widths: " + " ".join(str(w) for w in widths))
    lines.append("")
    for row in [list(header), *rows]:
        for i, cell in enumerate(row):
            text = " ".join(str(cell).split()) or r"\ "
            lines.append(f"   {'*' if i == 0 else ' '} - {text}")
    content = StringList(lines, source=source)
    node = nodes.section()
    node.document = directive.state.document
    nested_parse_with_titles(directive.state, content, node)
    return node.children
