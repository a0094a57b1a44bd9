"""Every benchmark result says where it came from (issue 26: each number on the Results pages
comes from a command in ``benchmarks/`` run on a commit, and says which)."""

import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from result_files import PROVENANCE_PREFIX, provenance_line  # noqa: E402

RESULTS = sorted((ROOT / "benchmarks" / "results").glob("*.md"))
_LINE = re.compile(r"^Made by `\.venv/bin/python (benchmarks/\w+\.py)( [^`]*)?` on commit "
                   r"([0-9a-f]{7,40})( with uncommitted changes)? \(apache-tvm [^)]+\), "
                   r"\d{4}-\d\d-\d\d\.$")


@pytest.mark.parametrize("path", RESULTS, ids=[p.name for p in RESULTS])
def test_result_names_its_command_and_commit(path):
    first = path.read_text(encoding="utf-8").splitlines()[0]
    match = _LINE.match(first)
    assert match, f"{path.name} does not start with a provenance line: {first!r}"
    assert (ROOT / match.group(1)).is_file(), f"{path.name}: {match.group(1)} does not exist"
    assert match.group(4) is None, f"{path.name} was made from uncommitted code"


def test_provenance_line_form():
    line = provenance_line([str(ROOT / "benchmarks" / "zoo_timing.py"), "--hw", "ipu-mk2"])
    assert line.startswith(PROVENANCE_PREFIX + ".venv/bin/python benchmarks/zoo_timing.py --hw ipu-mk2`")
    assert _LINE.match(line.replace(" with uncommitted changes", "")), line
