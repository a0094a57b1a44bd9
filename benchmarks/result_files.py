"""Where each benchmark result came from: the command and the commit, written with the result.

Every markdown table a script in ``benchmarks/`` writes to ``benchmarks/results/`` starts with
one provenance line, so a number on the documentation's Results pages always says which
command made it, on which commit, with which TVM (``tests/test_result_files.py`` checks every
results file has it). Every JSON results file (:func:`write_json`) carries the whole record
(:class:`tvm_icca.provenance.Provenance`: full commit, uncommitted changes, versions, host, UTC
time, command) on each of its rows.
"""

from __future__ import annotations

import json
import pathlib
import shlex
import sys
from typing import Any

from tvm_icca.provenance import Provenance, current, process_checkout_state

ROOT = pathlib.Path(__file__).resolve().parent.parent
# the commit a script records is the checkout's when it started (imported this module): the
# code it runs, even if commits land in the checkout while it runs for hours
process_checkout_state()

#: The first words of every provenance line (the docs and the test look for them).
PROVENANCE_PREFIX = "Made by `"
#: The key of the provenance record in a JSON results row (or file, :func:`stamp`).
PROVENANCE_KEY = "provenance"


def command_line(argv: list[str] | None = None) -> str:
    """The command of this run as typed from the repository root."""
    argv = sys.argv if argv is None else argv
    script = pathlib.Path(argv[0]).resolve()
    try:
        script_text = str(script.relative_to(ROOT))
    except ValueError:
        script_text = argv[0]
    return shlex.join([".venv/bin/python", script_text, *argv[1:]])


def provenance(argv: list[str] | None = None) -> Provenance:
    """The provenance record of this run (its command from ``argv``, default ``sys.argv``)."""
    return current(command_line(argv))


def provenance_line(argv: list[str] | None = None) -> str:
    """One line naming the command (as typed from the repository root), commit, versions, date."""
    record = provenance(argv)
    commit = record.short_commit + (" with uncommitted changes" if record.dirty else "")
    return (f"{PROVENANCE_PREFIX}{record.command}` on commit {commit} (apache-tvm "
            f"{record.tvm_version}, Python {record.python_version}), {record.timestamp[:10]}.")


def write_markdown(path: pathlib.Path | str, text: str) -> None:
    """Write a results markdown file whose first line is the provenance of this run."""
    path = pathlib.Path(path)
    path.write_text(provenance_line() + "\n\n" + text.rstrip("\n") + "\n", encoding="utf-8")


def _is_rows(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(r, dict) for r in value)


def stamp(data: Any, record: Provenance) -> Any:
    """``data`` with ``record`` on every row that has none; rows that have one keep it.

    A row is a mapping in a list that is ``data`` itself or one of its values (a file of
    rows, or of named tables of rows). A file merged from an earlier run (``--append``)
    keeps each old row's own record, so every row names the code that computed it; an old
    row made before rows had records is merged with ``None`` there, and keeps it (this run's
    record would say this run made it). A mapping
    without rows (one result, e.g. a fitted model) gets the record as one key.

    Parameters
    ----------
    data : list or dict
        The JSON document (changed in place and returned).
    record : Provenance
        This run's record.

    Returns
    -------
    list or dict
        ``data``.
    """
    tables = ([data] if _is_rows(data) else
              [v for v in data.values() if _is_rows(v)] if isinstance(data, dict) else None)
    if tables is None:
        raise TypeError(f"a JSON results file is a list of rows or a mapping, not "
                        f"{type(data).__name__}")
    for rows in tables:
        for row in rows:
            row.setdefault(PROVENANCE_KEY, record.to_dict())
    if not tables and isinstance(data, dict):
        data[PROVENANCE_KEY] = record.to_dict()
    return data


def write_json(path: pathlib.Path | str, data: Any, argv: list[str] | None = None) -> None:
    """Write a JSON results file whose rows carry this run's provenance (:func:`stamp`)."""
    path = pathlib.Path(path)
    text = json.dumps(stamp(data, provenance(argv)), indent=1)
    path.write_text(text + "\n", encoding="utf-8")
