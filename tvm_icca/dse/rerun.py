"""Re-run rows of a results file from what they recorded, and compare the new rows with them.

``tvm-icca dse rerun RESULTS [--rows ...]`` (:func:`rerun`): each chosen row is computed again
from its stored inputs alone, no spec needed: the chip from its full spec in the results'
provenance file (the row's ``chip_digest``, :func:`tvm_icca.dse.results.read_chips`), the
workload and its arguments (``workload``, ``workload_args``), the design, the state and the
execution model. The new row is compared with the stored one column by column (every result
column both have; what measures the host, the code's provenance and the time are left out), and
a table says, per row, the stored and new ``total_s``, their relative difference, and the
largest difference among the other columns. A row reproduces when its status and every compared
column agree within ``tolerance`` (relative, on numbers; equality otherwise).

A row written before rows stored their chip (no ``chip_digest``, or no provenance file beside
the results) cannot be re-run: it is reported as such and does not reproduce.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from runtime_sim.contract.errors import IccaError, InvalidSpecError
from tvm_icca.dse.points import DsePoint, chip_digest, point_key
from tvm_icca.dse.results import clean_row, read_chips, read_rows
from tvm_icca.dse.run import task_for
from tvm_icca.dse.worker import PROVENANCE_KEYS, TIMING_KEYS, evaluate
from tvm_icca.hardware_choice import HardwareSpec

__all__ = ["DEFAULT_TOLERANCE", "RerunRow", "RerunResult", "rerun", "select_rows"]

#: Relative difference under which a number reproduces. The compiler and the timing simulator
#: are deterministic; the margin only absorbs a float sum taken in another order.
DEFAULT_TOLERANCE = 1e-9
#: Columns that describe the run, not the result: never compared.
_NOT_RESULTS = frozenset(TIMING_KEYS) | frozenset(PROVENANCE_KEYS) | {
    "key", "point_id", "chip_digest", "supersedes"}
#: A key prefix is at least this long (shorter digit strings are row indices).
_MIN_PREFIX = 8


@dataclass
class RerunRow:
    """One re-run row: the stored row, the new one, and where they differ.

    Parameters
    ----------
    index : int
        The row's place in :func:`tvm_icca.dse.results.read_rows` (0-based).
    stored : dict
        The row as the results file holds it.
    new : dict or None
        The row computed now (None: it could not be re-run, see ``problem``).
    problem : str
        Why it could not be re-run, or a note (the key the stored chip gives now differs).
    differences : dict
        Column -> (stored, new, relative difference or None for non-numbers), for every
        compared column that does not agree within the tolerance.
    compared : int
        How many columns were compared.
    """

    index: int
    stored: dict[str, Any]
    new: dict[str, Any] | None = None
    problem: str = ""
    differences: dict[str, tuple[Any, Any, float | None]] = field(default_factory=dict)
    compared: int = 0

    @property
    def agrees(self) -> bool:
        """The row was re-run and every compared column agrees."""
        return self.new is not None and not self.differences


@dataclass
class RerunResult:
    """What :func:`rerun` found.

    Parameters
    ----------
    results : str
        The results file.
    rows : list of RerunRow
        The chosen rows, in file order.
    tolerance : float
        The relative tolerance used.
    """

    results: str
    rows: list[RerunRow]
    tolerance: float

    @property
    def agrees(self) -> bool:
        """Every chosen row was re-run and reproduces."""
        return all(r.agrees for r in self.rows)

    def table(self) -> str:
        """The stored vs new table, one line per row, then a one-line verdict."""
        head = ["row", "key", "point", "status", "total_s stored", "total_s new", "rel. diff",
                "largest other difference"]
        lines = [head]
        for r in self.rows:
            new = r.new or {}
            status = str(r.stored.get("status"))
            if r.new is not None and new.get("status") != r.stored.get("status"):
                status += f" -> {new.get('status')}"
            total = r.differences.get("total_s")
            other = [(k, d) for k, d in r.differences.items() if k not in ("total_s", "status")]
            if r.new is None:
                worst = f"not re-run: {r.problem}"
            elif other:
                name, (a, b, rel) = max(other, key=lambda kd: -1 if kd[1][2] is None else kd[1][2])
                worst = f"{name}: {_fmt(a)} -> {_fmt(b)}" + (f" ({rel:.2e})" if rel is not None else "")
                worst += f" (+{len(other) - 1} more)" if len(other) > 1 else ""
            else:
                worst = f"none of {r.compared} columns"
            lines.append([str(r.index), str(r.stored.get("key", ""))[:12], _label(r.stored), status,
                          _fmt(r.stored.get("total_s")), _fmt(new.get("total_s")) if r.new else "",
                          (f"{total[2]:.2e}" if total and total[2] is not None else
                           "0" if r.new is not None and "total_s" in r.stored else ""), worst])
        widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
        text = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines]
        bad = sum(not r.agrees for r in self.rows)
        verdict = (f"{len(self.rows)} row(s) re-run from {self.results}: "
                   + (f"all reproduce within {self.tolerance:g} (relative)" if not bad else
                      f"{bad} do not reproduce within {self.tolerance:g} (relative)"))
        return "\n".join([*text, verdict])


def select_rows(rows: Sequence[dict[str, Any]], choice: str | None = None,
                sample: int | None = None) -> list[int]:
    """The indices of the rows ``choice`` names.

    Parameters
    ----------
    rows : sequence of dict
        The results' rows (:func:`tvm_icca.dse.results.read_rows`).
    choice : str, optional
        Comma-separated items: a row index (``3``, 0-based, the order of the file), a range
        (``3-7``, both ends included) or a key prefix (at least 8 hex digits, or any prefix
        with a letter; it must name one row). None: every row.
    sample : int, optional
        Of the chosen rows, this many spread evenly (the first and the last included).

    Returns
    -------
    list of int
        Sorted, without repeats.

    Raises
    ------
    InvalidSpecError
        An item names no row, or a key prefix several.
    """
    chosen: set[int] = set()
    if choice is None:
        chosen = set(range(len(rows)))
    else:
        for item in (i.strip() for i in choice.split(",")):
            match = re.fullmatch(r"(\d+)(?:-(\d+))?", item)
            if match and len(item) < _MIN_PREFIX:
                lo = int(match.group(1))
                hi = int(match.group(2)) if match.group(2) else lo
                if hi < lo or hi >= len(rows):
                    raise InvalidSpecError(f"--rows {item}: the results have rows 0-{len(rows) - 1}")
                chosen.update(range(lo, hi + 1))
            elif re.fullmatch(r"[0-9a-fA-F]+", item):
                hits = [i for i, r in enumerate(rows) if str(r.get("key", "")).startswith(item.lower())]
                if len(hits) != 1:
                    raise InvalidSpecError(f"--rows {item}: the key prefix names {len(hits)} rows "
                                           "(give a longer prefix)" if hits else
                                           f"--rows {item}: no row's key starts with it")
                chosen.add(hits[0])
            else:
                raise InvalidSpecError(f"--rows {item!r}: not a row index, range (3-7) or key "
                                       "prefix")
    picked = sorted(chosen)
    if sample is not None and sample < len(picked):
        if sample < 1:
            raise InvalidSpecError(f"--sample must be positive, got {sample}")
        step = (len(picked) - 1) / max(1, sample - 1)
        picked = sorted({picked[round(i * step)] for i in range(sample)})
    return picked


def rerun(results: "str | os.PathLike[str]", rows: str | None = None, *, sample: int | None = None,
          tolerance: float = DEFAULT_TOLERANCE, base_dir: str | None = None) -> RerunResult:
    """Compute rows of a results file again from their stored inputs and compare.

    Parameters
    ----------
    results : str or os.PathLike
        The results file (its provenance file beside it holds the chips).
    rows : str, optional
        Which rows (:func:`select_rows`); None: all.
    sample : int, optional
        Re-run this many of them, spread evenly (:func:`select_rows`).
    tolerance : float
        Relative difference under which numbers agree.
    base_dir : str, optional
        Where relative ONNX paths are (default: the results file's directory).

    Returns
    -------
    RerunResult
        Per row the stored and new row and their differences (:meth:`RerunResult.table`).

    Raises
    ------
    InvalidSpecError
        ``rows`` names no row, or the file has none.
    IccaError
        The file is not a results file.
    """
    where = os.fspath(results)
    if not os.path.isfile(where):
        raise InvalidSpecError(f"no such results file '{where}'")
    stored = read_rows(where)
    if not stored:
        raise InvalidSpecError(f"results file '{where}' has no rows")
    chips = read_chips(where)
    base = base_dir or os.path.dirname(os.path.abspath(where))
    out = []
    for index in select_rows(stored, rows, sample):
        row = stored[index]
        item = RerunRow(index=index, stored=row)
        try:
            task = _task(row, chips, base)
        except IccaError as err:
            item.problem = str(err)
            out.append(item)
            continue
        if task.pop("_note", ""):
            item.problem = "the stored chip gives another key now (its spec or the key's format changed)"
        new = evaluate(task)
        item.new = new
        item.compared, item.differences = _compare(row, new, tolerance)
        out.append(item)
    return RerunResult(results=where, rows=out, tolerance=tolerance)


def _task(row: dict[str, Any], chips: dict[str, dict[str, Any]], base_dir: str) -> dict[str, Any]:
    """The worker task of a stored row (:func:`tvm_icca.dse.run.task_for`'s form)."""
    digest = row.get("chip_digest")
    if not digest:
        raise IccaError("the row records no chip (written before rows stored their chip)")
    if digest not in chips:
        raise IccaError(f"chip {str(digest)[:12]} is not in the provenance file beside the results")
    stored_chip = chips[digest]
    hw = HardwareSpec.from_dict(stored_chip)
    if chip_digest(stored_chip) != digest:
        raise IccaError(f"the provenance file's chip {str(digest)[:12]} does not match its digest")
    args = row.get("workload_args")
    if not isinstance(args, dict) or "workload" not in row:
        raise IccaError("the row records no workload arguments")
    workload = {"workload": row["workload"], **args}
    state = None if row.get("state") in (None, "auto") else row["state"]
    design, execution = row.get("design"), row.get("execution", "t10")
    point = DsePoint(index=0, hardware={}, workload=workload, design=design, state=state,
                     execution=execution, hw=hw, group=str(digest), key=str(row.get("key")),
                     point_id=str(row.get("point_id", "")))
    inputs = {k: row[k] for k in row.get("inputs", []) if k in row}
    task = task_for(point, inputs, base_dir)
    task["trace"]["chip_digest"] = digest  # the stored chip's own name, whatever it hashes to now
    task["_note"] = point_key(hw, workload, design, state, execution) != row.get("key")
    return task


def _compare(old: dict[str, Any], new: dict[str, Any],
             tolerance: float) -> tuple[int, dict[str, tuple[Any, Any, float | None]]]:
    differences: dict[str, tuple[Any, Any, float | None]] = {}
    new = clean_row(new)  # as the file would hold it: NaN and infinities as null
    names = [k for k in old if k in new and k not in _NOT_RESULTS]
    for name in names:
        a, b = old[name], new[name]
        if _number(a) and _number(b):
            scale = max(abs(a), abs(b))
            rel = 0.0 if a == b else (abs(a - b) / scale if scale else math.inf)
            if rel > tolerance:
                differences[name] = (a, b, rel)
        elif json.dumps(a, sort_keys=True, default=str) != json.dumps(b, sort_keys=True,
                                                                       default=str):
            differences[name] = (a, b, None)
    if old.get("status") != new.get("status"):
        differences["status"] = (old.get("status"), new.get("status"), None)
    return len(names), differences


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _label(row: dict[str, Any]) -> str:
    args = row.get("workload_args") or {}
    shown = ",".join(f"{k}={v}" for k, v in args.items())
    return (f"{row.get('workload')}{f'({shown})' if shown else ''} on {row.get('hardware')} "
            f"{row.get('design')}")
