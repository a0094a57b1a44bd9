"""Tables and plots of a results file (``tvm-icca dse report RESULTS``).

:func:`write_report` writes into a directory:

* ``report.md``: the fixed inputs, then one table row per point (its varying inputs, design,
  status, time, its largest floor and the resource it names (``run_bound_by``), the time over
  that floor and, past 1.5x, the largest parts of the rest (``remainder``), Elk's breakdown,
  utilizations);
* ``<axis>.png`` for every swept input (an input with more than one value, the design
  excepted): time against that axis, one line per design, one panel per combination of the
  other swept inputs, with every floor that bounds a point of the panel dashed
  (:func:`runtime_sim.timing.floors.resource_floors`), so a reader sees which resource bounds
  each point.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any, Sequence

from runtime_sim.contract.errors import IccaError
from runtime_sim.timing.floors import FLOOR_KEYS, bound_name, shares
from tvm_icca.dse.results import read_rows
from tvm_icca.dse.worker import OK

__all__ = ["FLOORS", "write_report", "markdown_table"]

#: The floors a report draws: row key, label, line colour (a plot draws those that bound a
#: point of its panel).
FLOORS = tuple((key, f"{bound_name(key)} floor", colour) for key, colour in zip(FLOOR_KEYS, (
    "tab:olive", "tab:green", "tab:red", "tab:brown", "tab:purple", "tab:orange", "tab:pink",
    "tab:gray", "tab:cyan", "tab:blue")))
#: Parts of a row's ``remainder`` the table names (the largest).
REMAINDER_PARTS = 2
#: Inputs that are never an axis of a plot: the study's name, and the design (the lines).
_NOT_AXES = ("spec", "design")
#: Most panels of one figure; a larger product of the other axes is cut (the table has all).
MAX_PANELS = 12


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        return _canon(value)
    return str(value)


def _ms(row: dict[str, Any], key: str) -> str:
    value = row.get(key)
    return f"{value * 1e3:.4g}" if isinstance(value, (int, float)) else ""


def _pct(row: dict[str, Any], key: str) -> str:
    value = row.get(key)
    return f"{value:.1%}" if isinstance(value, (int, float)) else ""


def _inputs(rows: Sequence[dict[str, Any]]) -> list[str]:
    names: list[str] = []
    for row in rows:
        names.extend(k for k in row.get("inputs", ()) if k not in names)
    return names


def _varying(rows: Sequence[dict[str, Any]], names: Sequence[str]) -> list[str]:
    return [n for n in names if len({_canon(r.get(n)) for r in rows}) > 1]


def bound_by(row: dict[str, Any]) -> str:
    """The resource a row is bound by: its ``run_bound_by``; for a row written before runs
    reported one, the largest of whatever floors it has (``hbm``, ``compute``,
    ``interconnect``); '' without floors."""
    if "run_bound_by" in row:
        return str(row["run_bound_by"])
    floors = {bound_name(key): value for key, value in row.items()
              if key.endswith("_floor_s") and isinstance(value, (int, float))}
    return max(floors, key=floors.get) if floors and max(floors.values()) > 0 else ""


def largest_floor(row: dict[str, Any]) -> float | None:
    """A row's ``floor_s``, or the largest of its floors for an older row (None: none)."""
    if isinstance(row.get("floor_s"), (int, float)):
        return float(row["floor_s"])
    floors = [v for k, v in row.items() if k.endswith("_floor_s") and isinstance(v, (int, float))]
    return max(floors) if floors else None


def _beyond_floor(row: dict[str, Any]) -> tuple[str, str]:
    """The table's "time / floor" and "remainder" cells of a row."""
    floor, total = largest_floor(row), row.get("total_s")
    if not floor or not isinstance(total, (int, float)):
        return "", ""
    parts = row.get("remainder") or {}
    named = ", ".join(f"{part} {share:.0%}" for part, _, share in
                      shares(parts, total)[:REMAINDER_PARTS]) if isinstance(parts, dict) else ""
    return f"{total / floor:.2f}x", named


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """The markdown of ``rows``: fixed inputs as a list, then one table row per point.

    Parameters
    ----------
    rows : sequence of dict
        Rows of a results file (:func:`tvm_icca.dse.read_rows`).

    Returns
    -------
    str
        Markdown text.
    """
    names = _inputs(rows)
    varying = _varying(rows, names)
    fixed = [n for n in names if n not in varying]
    lines = [f"# Design-space exploration: {', '.join(sorted({str(r.get('spec', '')) for r in rows}))}",
             "", f"{len(rows)} points; " + ", ".join(
                 f"{sum(r.get('status') == s for r in rows)} {s}" for s in ("ok", "does_not_fit", "failed")),
             "", "Fixed inputs: " + ", ".join(f"`{n}` = {_fmt(rows[0].get(n))}" for n in fixed), ""]
    columns = [*[n for n in varying if n != "design"], "design", "status", "total ms",
               "floor ms", "bound by", "time / floor", "remainder", "HBM floor ms",
               "preload-only ms", "execute-only ms", "overlapped ms", "interconnect stall ms",
               "HBM util", "interconnect util", "FLOPS util", "compile s"]
    lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in sorted(rows, key=lambda r: [_sort_key(r.get(n)) for n in varying]):
        cells = [_fmt(row.get(n)) for n in varying if n != "design"]
        cells += [str(row.get("design", "")), str(row.get("status", ""))]
        if row.get("status") == OK:
            floor = largest_floor(row)
            cells += [_ms(row, "total_s"), "" if floor is None else f"{floor * 1e3:.4g}",
                      bound_by(row), *_beyond_floor(row), _ms(row, "hbm_floor_s"),
                      _ms(row, "preload_only_s"),
                      _ms(row, "execute_only_s"), _ms(row, "preload_overlap_s"),
                      _ms(row, "interconnect_stall_s"), _pct(row, "hbm_utilization"),
                      _pct(row, "interconnect_utilization"), _pct(row, "flops_utilization")]
        else:
            reason = str(row.get("reason", "")).replace("|", "/").splitlines()
            cells += [reason[0][:120] if reason else ""] + [""] * 12
        cells.append(f"{row.get('compile_s', 0.0):.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _sort_key(value: Any) -> tuple:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, _canon(value))


def _is_number(values: Sequence[Any]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _plot_axis(rows: Sequence[dict[str, Any]], axis: str, others: Sequence[str], path: str) -> None:
    from matplotlib.figure import Figure  # pylint: disable=import-outside-toplevel

    combos: dict[str, dict[str, Any]] = {}
    for row in rows:
        combos.setdefault(_canon([row.get(o) for o in others]), {o: row.get(o) for o in others})
    panels = sorted(combos.items(), key=lambda kv: [_sort_key(v) for v in kv[1].values()])[:MAX_PANELS]
    designs = list(dict.fromkeys(str(r.get("design")) for r in rows))
    xs = sorted({_canon(r.get(axis)): r.get(axis) for r in rows}.values(), key=_sort_key)
    numeric = _is_number(xs)
    positions = xs if numeric else list(range(len(xs)))
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig = Figure(figsize=(5.0 * ncols, 3.8 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    legend = False
    for index, (canon, fixed) in enumerate(panels):
        ax = axes[index // ncols][index % ncols]
        here = [r for r in rows if _canon([r.get(o) for o in others]) == canon]
        at = {_canon(x): i for i, x in enumerate(xs)}
        ax.set_title(", ".join(f"{k}={_fmt(v)}" for k, v in fixed.items()) or axis, fontsize=9)
        if not any(r.get("status") == OK for r in here):
            ax.text(0.5, 0.5, "no point fits or ran\n(see the table)", ha="center",
                    va="center", transform=ax.transAxes)
            ax.set_axis_off()
            continue
        for design in designs:
            ys = [math.nan] * len(xs)
            for r in here:
                if str(r.get("design")) == design and r.get("status") == OK:
                    ys[at[_canon(r.get(axis))]] = r["total_s"] * 1e3
            ax.plot(positions, ys, marker="o", label=design)
        binding = {bound_by(r) for r in here if r.get("status") == OK}
        for key, label, colour in FLOORS:
            if bound_name(key) not in binding:
                continue
            floor = [math.nan] * len(xs)
            for r in here:  # the least over designs: what the best schedule could reach
                value = r.get(key)
                if r.get("status") == OK and isinstance(value, (int, float)):
                    i = at[_canon(r.get(axis))]
                    floor[i] = value * 1e3 if math.isnan(floor[i]) else min(floor[i], value * 1e3)
            if any(not math.isnan(f) and f > 0 for f in floor):
                ax.plot(positions, floor, linestyle="--", color=colour, linewidth=1, label=label)
        if numeric and min(xs) > 0 and max(xs) / min(xs) >= 8:
            ax.set_xscale("log")
        if not numeric:
            ax.set_xticks(positions, [_fmt(x) for x in xs], rotation=20)
        ax.set_xlabel(axis)
        ax.set_ylabel("time per run (ms)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        if not legend:  # once: the designs and the floors are the same in every panel
            ax.legend(fontsize=8)
            legend = True
    for index in range(len(panels), nrows * ncols):
        axes[index // ncols][index % ncols].set_visible(False)
    fig.suptitle(f"time against {axis}" + (f" ({len(combos) - len(panels)} more combinations "
                                           "in the table)" if len(combos) > len(panels) else ""))
    fig.savefig(path, dpi=110)


def write_report(results: "str | os.PathLike[str]", out: "str | os.PathLike[str] | None" = None,
                 *, plots: bool = True) -> list[str]:
    """Write the markdown table and one plot per swept axis of a results file.

    Parameters
    ----------
    results : str or os.PathLike
        A results file of :func:`tvm_icca.dse.run` (JSON lines).
    out : str or os.PathLike, optional
        The directory to write into (created if needed); default: ``<results stem>_report``
        beside the results file.
    plots : bool
        Also draw the plots (needs matplotlib, ``pip install 'tvm-icca[dse]'``).

    Returns
    -------
    list of str
        The files written: ``report.md`` first, then the plots.

    Raises
    ------
    IccaError
        The results file holds no rows, or plots were asked for without matplotlib.
    """
    where = os.fspath(results)
    rows = read_rows(where)
    if not rows:
        raise IccaError(f"results file '{where}' holds no rows (no such file, or empty)")
    directory = os.fspath(out) if out is not None else os.path.splitext(where)[0] + "_report"
    os.makedirs(directory, exist_ok=True)
    table = os.path.join(directory, "report.md")
    with open(table, "w", encoding="utf-8") as file:
        file.write(markdown_table(rows))
    written = [table]
    if not plots:
        return written
    try:
        import matplotlib  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        raise IccaError("the report's plots need matplotlib: pip install 'tvm-icca[dse]' "
                        "(or plots=False / --no-plots for the table alone)") from None
    varying = [n for n in _varying(rows, _inputs(rows)) if n not in _NOT_AXES]
    for axis in varying:
        others = [n for n in varying if n != axis]
        path = os.path.join(directory, re.sub(r"[^A-Za-z0-9_.-]+", "_", axis) + ".png")
        _plot_axis(rows, axis, others, path)
        written.append(path)
    return written
