"""The ``icca-error-types`` directive: an autodoc entry for every error class ``tvm_icca`` exports.

The classes are ``runtime_sim.contract.errors.ERROR_TYPES`` (``tvm_icca`` re-exports each one),
so a new error type appears in the API reference without editing it, in the order of its
hierarchy (base classes first).
"""

from __future__ import annotations

from docutils.statemachine import StringList
from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles


class IccaErrorTypes(SphinxDirective):
    """``.. icca-error-types::``."""

    def run(self):
        from runtime_sim.contract.errors import ERROR_TYPES

        # base classes first, then by name: a reader meets IccaError before its subclasses
        ordered = sorted(ERROR_TYPES, key=lambda n: (len(ERROR_TYPES[n].__mro__), n))
        source = self.get_source_info()[0]
        lines: list[str] = []
        for name in ordered:
            lines += [f".. autoexception:: tvm_icca.{name}", ""]
        node = nodes.section()
        node.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, source=source), node)
        return node.children


def setup(app: Sphinx) -> dict:
    app.add_directive("icca-error-types", IccaErrorTypes)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
