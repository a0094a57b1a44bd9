"""The ``metric-glossary`` directive: the tables of :mod:`runtime_sim.contract.metrics`.

``.. metric-glossary:: run`` lists ``METRICS`` (run-level), ``.. metric-glossary:: op`` lists
``OP_METRICS`` (per-operator rows), ``.. metric-glossary:: dse`` lists ``DSE_METRICS`` (the
rows of a design-space exploration's results file): name, unit, meaning and who reports it, read from the one
definition the code and its tests use.
"""

from __future__ import annotations

from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

from rst_table import parse_table


class MetricGlossary(SphinxDirective):
    """``.. metric-glossary:: run|op|dse``."""

    required_arguments = 1

    def run(self):
        from runtime_sim.contract.metrics import DSE_METRICS, METRICS, OP_METRICS

        tables = {"run": ("Run-level metrics", METRICS), "op": ("Per-operator metrics", OP_METRICS),
                  "dse": ("Design-space exploration rows", DSE_METRICS)}
        which = self.arguments[0]
        if which not in tables:
            raise self.error(f"metric-glossary takes one of {', '.join(tables)}, not {which!r}")
        title, table = tables[which]
        rows = [[f"``{name}``", m.unit, m.meaning, m.source] for name, m in table.items()]
        return parse_table(self, title, ("name", "unit", "meaning", "reported by"), rows,
                           widths=(22, 10, 56, 12))


def setup(app: Sphinx) -> dict:
    app.add_directive("metric-glossary", MetricGlossary)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
