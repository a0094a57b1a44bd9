"""Hand-written documentation is reference: no commit hashes, no talk of one machine's runs.

Where a number came from (its commit, the machine, the command) belongs to the generated
results pages (``benchmarks/results/``, which keep their provenance lines) and to the rows
themselves; what changed between versions belongs to ``CHANGELOG.md``. The hand-written pages
say what the code does and what the results are.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(
    [ROOT / "README.md"]
    + [p for p in (ROOT / "docs").glob("*") if p.suffix in (".md", ".rst")]
    + sorted((ROOT / "docs" / "design").glob("*.md")),
    key=str,
)

# A short or full git object name: 7 to 40 hex digits with at least one digit and one letter
# (plain numbers and words such as "defaced" are not hashes).
HASH = re.compile(r"(?<![\w./-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w/-])")
# How lab notebooks talk; a reference page names the measurement's conditions instead.
NOTEBOOK = re.compile(r"2-core machine|this commit|on this machine,? (?:we|it took)|workers here|"
                      r"we first tried|\bwill be (?:computed|run) again\b|next issue", re.I)


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """The page's lines outside code: markdown fences and reStructuredText literal blocks
    (example output there may hold hex digests of sweep points, which are data)."""
    lines = path.read_text().splitlines()
    out, fenced, literal = [], False, False
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if path.suffix == ".rst":
            if literal and line and not line[0].isspace():
                literal = False
            if line.rstrip().endswith("::"):
                literal = True
                continue
        if not fenced and not literal:
            out.append((number, line))
    return out


def test_pages_found():
    names = {p.relative_to(ROOT).as_posix() for p in PAGES}
    assert {"README.md", "docs/long_context.md", "docs/dse_elk.md",
            "docs/architecture.rst", "docs/design/layout.md"} <= names


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_commit_hashes_or_notebook_talk(path):
    found = [(n, line.strip()) for n, line in prose_lines(path)
             if HASH.search(line) or NOTEBOOK.search(line)]
    assert not found, f"{path.name}: history belongs in CHANGELOG.md, provenance in results files"


def test_the_patterns_catch_what_they_are_for():
    assert HASH.search("the decode rows come from the run on commit c20b25d;")
    assert HASH.search("(commit 5b64924)")
    for clean in ("--max-batch 1048576", "a defaced page", "2.97 hours", "sha256:",
                  "results/elk_dse_fig19.png", "0x1f"):
        assert not HASH.search(clean), clean
    assert NOTEBOOK.search("two studies side by side on a 2-core machine")
    assert not NOTEBOOK.search("two studies side by side on 2 shared CPU cores")
