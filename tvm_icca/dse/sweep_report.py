"""Tables and plots of a results file (``tvm-icca dse report RESULTS``).

:func:`write_report` writes into a directory:

* ``report.md``: what made each file (the command and the commit, the results' own runs
  included), the fixed inputs, the Pareto fronts of every workload instance as tables, then
  one table row per point (its varying inputs, design, status, time and energy per token, the
  time per run, its largest floor and the resource it names (``run_bound_by``), the time over
  that floor and, past 1.5x, the largest parts of the rest (``remainder``), Elk's breakdown,
  utilizations, whether it is on a front);
* ``table.csv`` and ``table.parquet`` with ``formats`` (``--format csv,parquet``): the whole
  table, every column of the rows and the derived ones
  (:func:`tvm_icca.dse.columns.results_frame`), for pandas, Excel or a notebook;
* ``<axis>.png`` for every swept input (an input with more than one value, the design and the
  workload excepted: they are the lines and the panels): time per token against that input
  (:func:`tvm_icca.dse.report_plots.axis_plot`);
* ``pareto_energy.png`` (when rows have an energy) and ``pareto_sram.png`` (when the system's
  SRAM differs between the points of a workload): the Pareto fronts
  (:func:`tvm_icca.dse.report_plots.pareto_plot`).

Every table is written by pandas (``DataFrame.to_markdown``, ``to_csv``, ``to_parquet``):
``pip install 'tvm-icca[dse]'`` brings pandas, pyarrow and tabulate.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Sequence

from runtime_sim.contract.errors import IccaError
from runtime_sim.contract.units import si_unit, time_unit
from runtime_sim.timing.floors import bound_name, shares
from tvm_icca.dse.columns import PARETO_COLUMNS, derived_rows, is_number, results_frame
from tvm_icca.dse.results import read_chips, read_rows, read_runs
from tvm_icca.dse.worker import OK
from tvm_icca.provenance import current

__all__ = ["FORMATS", "bound_by", "largest_floor", "markdown_table", "write_report"]

#: Table formats of :func:`write_report`: ``md`` (``report.md``, always written), ``csv``
#: (``table.csv``) and ``parquet`` (``table.parquet``).
FORMATS = ("md", "csv", "parquet")
#: Parts of a row's ``remainder`` the table names (the largest).
REMAINDER_PARTS = 2
#: Inputs that are never the x axis of a plot: the study's name, the design (the lines or
#: bars) and the workload (the panels).
_NOT_AXES = ("spec", "design", "workload")
#: Pareto plots: file stem -> (objective column, front column) (:data:`PARETO_COLUMNS`).
PARETO_PLOTS = {stem: (PARETO_COLUMNS[column], column)
                for stem, column in (("pareto_energy", "pareto"), ("pareto_sram", "pareto_sram"))}


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        return _canon(value)
    return "" if value is None else str(value)


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
              if key.endswith("_floor_s") and is_number(value)}
    return max(floors, key=floors.get) if floors and max(floors.values()) > 0 else ""


def largest_floor(row: dict[str, Any]) -> float | None:
    """A row's ``floor_s``, or the largest of its floors for an older row (None: none)."""
    if is_number(row.get("floor_s")):
        return float(row["floor_s"])
    floors = [v for k, v in row.items() if k.endswith("_floor_s") and is_number(v)]
    return max(floors) if floors else None


def _beyond_floor(row: dict[str, Any]) -> tuple[str, str]:
    """The table's "time / floor" and "remainder" cells of a row."""
    floor, total = largest_floor(row), row.get("total_s")
    if not floor or not is_number(total):
        return "", ""
    parts = row.get("remainder") or {}
    named = ", ".join(f"{part} {share:.0%}" for part, _, share in
                      shares(parts, total)[:REMAINDER_PARTS]) if isinstance(parts, dict) else ""
    return f"{total / floor:.2f}x", named


def _missing(value: Any) -> bool:
    return isinstance(value, float) and value != value  # NaN: pandas' missing value


def _unit_of(values: Sequence[Any], pick: Any) -> tuple[str, float]:
    numbers = [abs(float(v)) for v in values if is_number(v)]
    return pick(max(numbers, default=0.0))


def _in(value: Any, unit: tuple[str, float]) -> str:
    return f"{value / unit[1]:.4g}" if is_number(value) else ""


def _pct(value: Any) -> str:
    return f"{value:.1%}" if is_number(value) else ""


def _points_frame(rows: Sequence[dict[str, Any]], varying: Sequence[str]) -> Any:
    """The table of points a person reads: strings in per-column units."""
    import pandas as pd  # pylint: disable=import-outside-toplevel

    ok = [r for r in rows if r.get("status") == OK]
    t_unit = _unit_of([r.get("time_per_token_s") for r in ok], time_unit)
    e_unit = _unit_of([r.get("energy_per_token_j") for r in ok], lambda v: si_unit(v, "J"))
    run_unit = _unit_of([r.get("total_s") for r in ok], time_unit)
    ms = ("ms", 1e-3)
    lines = []
    from tvm_icca.dse.report_plots import input_unit  # pylint: disable=import-outside-toplevel

    units = {n: input_unit(n, [r.get(n) for r in rows]) for n in varying}
    heads = {n: f"{n} ({units[n][0]})" if units[n][0] else n for n in varying}
    for row in sorted(rows, key=lambda r: [_sort_key(r.get(n)) for n in varying]):
        line = {heads[n]: _in(row.get(n), units[n]) if is_number(row.get(n)) else _fmt(row.get(n))
                for n in varying if n != "design"}
        line["design"] = str(row.get("design", ""))
        line["status"] = str(row.get("status", ""))
        if row.get("status") == OK:
            floor = largest_floor(row)
            ratio, remainder = _beyond_floor(row)
            line.update({
                f"{t_unit[0]}/token": _in(row.get("time_per_token_s"), t_unit),
                f"{e_unit[0]}/token": _in(row.get("energy_per_token_j"), e_unit),
                "tokens/run": _fmt(row.get("tokens_per_run")),
                f"total {run_unit[0]}": _in(row.get("total_s"), run_unit),
                "floor ms": _in(floor, ms), "bound by": bound_by(row),
                "time / floor": ratio, "remainder": remainder,
                "HBM floor ms": _in(row.get("hbm_floor_s"), ms),
                "preload-only ms": _in(row.get("preload_only_s"), ms),
                "execute-only ms": _in(row.get("execute_only_s"), ms),
                "overlapped ms": _in(row.get("preload_overlap_s"), ms),
                "interconnect stall ms": _in(row.get("interconnect_stall_s"), ms),
                "HBM util": _pct(row.get("hbm_utilization")),
                "interconnect util": _pct(row.get("interconnect_utilization")),
                "FLOPS util": _pct(row.get("flops_utilization")),
                "pareto": "yes" if row.get("pareto") else "",
                "pareto (SRAM)": "yes" if row.get("pareto_sram") else "",
            })
        else:
            reason = str(row.get("reason", "")).replace("|", "/").splitlines()
            line[f"{t_unit[0]}/token"] = reason[0][:120] if reason else ""
        line["compile s"] = f"{row.get('compile_s', 0.0):.1f}" if is_number(
            row.get("compile_s")) else ""
        lines.append(line)
    frame = pd.DataFrame.from_records(lines).fillna("")
    if not any(is_number(r.get("energy_per_token_j")) for r in ok):
        frame = frame.drop(columns=[c for c in frame if c.endswith("J/token")])
    return frame


def _markdown(frame: Any) -> str:
    """A frame as a Markdown (pipe) table, by pandas (``to_markdown``, tabulate)."""
    try:
        return frame.to_markdown(index=False, disable_numparse=True)
    except ImportError:
        raise IccaError("the report's Markdown tables need tabulate: pip install "
                        "'tvm-icca[dse]'") from None


def markdown_table(rows: Sequence[dict[str, Any]],
                   chips: dict[str, dict[str, Any]] | None = None) -> str:
    """The markdown of ``rows``: counts, fixed inputs, then one table row per point.

    Parameters
    ----------
    rows : sequence of dict
        Rows of a results file (:func:`tvm_icca.dse.read_rows`).
    chips : dict, optional
        The results' chips (:func:`tvm_icca.dse.read_chips`), for the cost proxies.

    Returns
    -------
    str
        Markdown text (the table by ``DataFrame.to_markdown``).
    """
    table = derived_rows(rows, chips)
    names = _inputs(table)
    varying = _varying(table, names)
    fixed = [n for n in names if n not in varying]
    counts = ", ".join(f"{sum(r.get('status') == s for r in table)} {s}"
                       for s in ("ok", "does_not_fit", "failed"))
    head = [f"{len(table)} points; {counts}", "",
            "Fixed inputs: " + ", ".join(f"`{n}` = {_fmt(table[0].get(n))}" for n in fixed), "", ""]
    return "\n".join(head) + _markdown(_points_frame(table, varying)) + "\n"


def _sort_key(value: Any) -> tuple:
    if is_number(value):
        return (0, float(value), "")
    return (1, 0.0, _canon(value))


def _front_tables(table: Sequence[dict[str, Any]], inputs: Sequence[str]) -> list[str]:
    """Markdown: per Pareto column and workload instance, the points on the front."""
    import pandas as pd  # pylint: disable=import-outside-toplevel
    # pylint: disable=import-outside-toplevel
    from tvm_icca.dse.report_plots import input_unit, point_label

    out = []
    titles = {"pareto": "time per token against energy per token",
              "pareto_sram": "time per token against the system's SRAM (a cost proxy)"}
    for stem, (objective, column) in PARETO_PLOTS.items():
        out += [f"### Pareto front: {titles[column]}", ""]
        have = [r for r in table if r.get("status") == OK and is_number(r.get(objective))
                and is_number(r.get("time_per_token_s"))]
        if not have:
            why = ("no row has an energy (`energy_j`): the chips of this study have no energy "
                   "model" if column == "pareto" else "no row has a time per token and SRAM size")
            out += [f"None: {why}.", ""]
            continue
        out += [f"Plot: [{stem}.png]({stem}.png) (only where the objective differs within a "
                "workload). Lower is better in both; a point is on the front when no other point "
                "of its workload is at least as good in both and better in one.", ""]
        t_unit = _unit_of([r["time_per_token_s"] for r in have], time_unit)
        o_unit = (_unit_of([r[objective] for r in have], lambda v: si_unit(v, "J"))
                  if objective.endswith("_j") else input_unit(objective, [r[objective] for r in have]))
        o_name = {"energy_per_token_j": f"{o_unit[0]}/token",
                  "system_sram_bytes": f"SRAM of the system ({o_unit[0]})"}.get(objective, objective)
        for instance in dict.fromkeys(str(r.get("workload_instance")) for r in have):
            here = [r for r in have if str(r.get("workload_instance")) == instance]
            names = [n for n in inputs if n not in json.loads(instance)
                     and len({_canon(r.get(n)) for r in here}) > 1]
            units = {n: input_unit(n, [r.get(n) for r in here]) for n in names}
            front = sorted((r for r in here if r.get(column)),
                           key=lambda r: float(r["time_per_token_s"]))
            frame = pd.DataFrame.from_records([{
                "design point": point_label(r, names, units) or str(r.get("design", "")),
                f"{t_unit[0]}/token": _in(r["time_per_token_s"], t_unit),
                o_name: _in(r[objective], o_unit),
                "bound by": bound_by(r)} for r in front])
            label = ", ".join(f"{k}={v}" for k, v in json.loads(instance).items())
            out += [f"{label}: {len(front)} of {len(here)} points on the front", "",
                    _markdown(frame), ""]
    return out


def _files_table(results: str, written: Sequence[tuple[str, str]], command: str,
                 rows: Sequence[dict[str, Any]]) -> str:
    """Markdown: each file, what it holds, the command and the commit that made it."""
    import pandas as pd  # pylint: disable=import-outside-toplevel

    origin = current(command)
    made = f"{origin.short_commit}" + (" (uncommitted changes)" if origin.dirty else "")
    runs = read_runs(results)
    run_commands = list(dict.fromkeys(str(r.get("command", "")) for r in runs if r.get("command")))
    commits = sorted({str(r.get("commit", "unknown"))[:10] for r in rows if "commit" in r})
    dirty = any(r.get("dirty") for r in rows)
    lines = [{"file": f"`{os.path.basename(results)}`", "contents": f"the results: {len(rows)} rows",
              "made by": "; ".join(f"`{c}`" for c in run_commands) or "(runs not recorded)",
              "commit": ", ".join(commits) + (" (uncommitted changes)" if dirty else "")}]
    lines += [{"file": f"[{os.path.basename(p)}]({os.path.basename(p)})", "contents": what,
               "made by": f"`{command}`", "commit": made} for p, what in written]
    return _markdown(pd.DataFrame.from_records(lines))


def _write_frame(frame: Any, path: str, kind: str) -> None:
    frame = frame.copy()
    for column in frame.columns:  # a column of mixed types (numbers and text) as text
        kinds = {type(v) for v in frame[column] if v is not None and not _missing(v)}
        if len(kinds) > 1 and not kinds <= {int, float}:
            frame[column] = [None if v is None or _missing(v) else str(v) for v in frame[column]]
    if kind == "csv":
        frame.to_csv(path, index=False)
        return
    try:
        frame.to_parquet(path, index=False)
    except ImportError:
        raise IccaError("Parquet needs pyarrow: pip install 'tvm-icca[dse]'") from None


def write_report(results: "str | os.PathLike[str]", out: "str | os.PathLike[str] | None" = None,
                 *, plots: bool = True, formats: Sequence[str] = ("md",),
                 command: str | None = None) -> list[str]:
    """Write the report of a results file: ``report.md``, tables, plots and Pareto fronts.

    Parameters
    ----------
    results : str or os.PathLike
        A results file of :func:`tvm_icca.dse.run` (JSON lines).
    out : str or os.PathLike, optional
        The directory to write into (created if needed); default: ``<results stem>_report``
        beside the results file.
    plots : bool
        Also draw the plots (needs matplotlib, ``pip install 'tvm-icca[dse]'``).
    formats : sequence of str
        Table formats among :data:`FORMATS`: ``md`` (``report.md``, always written), ``csv``
        (``table.csv``), ``parquet`` (``table.parquet``): every column of
        :func:`tvm_icca.dse.columns.results_frame`.
    command : str, optional
        The command that made the report, named in ``report.md`` beside the commit (default:
        this Python call).

    Returns
    -------
    list of str
        The files written: ``report.md`` first, then the tables, then the plots.

    Raises
    ------
    IccaError
        The results file holds no rows, an unknown format, or a package the report needs
        (pandas, pyarrow, tabulate, matplotlib) is missing.
    """
    where = os.fspath(results)
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise IccaError(f"unknown report format(s) {', '.join(map(repr, unknown))}; known: "
                        f"{', '.join(FORMATS)}")
    rows = read_rows(where)
    if not rows:
        raise IccaError(f"results file '{where}' holds no rows (no such file, or empty)")
    directory = os.fspath(out) if out is not None else os.path.splitext(where)[0] + "_report"
    command = command or (f"tvm_icca.dse.write_report({where!r}, {directory!r}, plots={plots}, "
                          f"formats={list(formats)!r})")
    os.makedirs(directory, exist_ok=True)
    chips = read_chips(where)
    table = derived_rows(rows, chips)
    written: list[tuple[str, str]] = []
    frame = results_frame(rows, chips) if {"csv", "parquet"} & set(formats) else None
    for kind in ("csv", "parquet"):
        if kind in formats:
            path = os.path.join(directory, f"table.{kind}")
            _write_frame(frame, path, kind)
            written.append((path, f"every column of every row, {kind.upper()}"))
    notes: list[str] = []
    if plots:
        drawn, notes = _plots(table, directory)
        written += drawn
    report = os.path.join(directory, "report.md")
    inputs = _inputs(table)
    spec = ", ".join(sorted({str(r.get("spec", "")) for r in table}))
    text = [f"# Design-space exploration: {spec}", "",
            "## Files", "", _files_table(where, [(report, "this page"), *written], command, rows),
            "", *(f"{n}\n" for n in notes), "## Pareto fronts", "",
            *_front_tables(table, inputs), "## Points", "",
            markdown_table(rows, chips)]
    with open(report, "w", encoding="utf-8") as file:
        file.write("\n".join(text))
    return [report, *(p for p, _ in written)]


def _file_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def _follows(rows: Sequence[dict[str, Any]], axis: str, other: str) -> bool:
    """Whether ``other`` takes one value for each value of ``axis`` (it moves with the axis:
    a preset's link latency with its topology)."""
    seen: dict[str, str] = {}
    return all(seen.setdefault(_canon(r.get(axis)), _canon(r.get(other))) == _canon(r.get(other))
               for r in rows)


def _axes(table: Sequence[dict[str, Any]], varying: Sequence[str]
          ) -> tuple[list[tuple[str, list[str], list[str]]], list[str]]:
    """The x axes worth a plot, each with its panels' inputs and the inputs that follow it;
    and why the others are not drawn.

    An input that moves with an earlier axis (each determines the other) is that axis' plot
    again and is named beside it instead; the inputs that follow an axis do not split its
    panels (a topology plot is not cut by the link latency that comes with each topology); an
    axis that has one value in every panel (with a point that ran) draws nothing.
    """
    plots: list[tuple[str, list[str], list[str]]] = []
    notes = []
    ok = [r for r in table if r.get("status") == OK]
    for axis in varying:
        twin = next((a for a, _, follow in plots if axis in follow and _follows(table, axis, a)),
                    None)
        if twin is not None:
            notes.append(f"No plot against `{axis}`: it moves with `{twin}` (one value for "
                         f"each), in `{twin}.png`.")
            continue
        follow = [n for n in varying if n != axis and _follows(table, axis, n)]
        others = ["workload", *(n for n in varying if n != axis and n not in follow)]
        panels: dict[str, set[str]] = {}
        for row in ok:
            panels.setdefault(_canon([row.get(o) for o in others]), set()).add(
                _canon(row.get(axis)))
        if not any(len(values) > 1 for values in panels.values()):
            notes.append(f"No plot against `{axis}`: every panel (workload and the other swept "
                         "inputs) has one value of it.")
            continue
        plots.append((axis, others, follow))
    return plots, notes


def _plots(table: Sequence[dict[str, Any]], directory: str
           ) -> tuple[list[tuple[str, str]], list[str]]:
    """Draw the axis plots and the Pareto plots; (path, what it shows) of each, and notes on
    the axes not drawn."""
    try:
        import matplotlib  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        raise IccaError("the report's plots need matplotlib: pip install 'tvm-icca[dse]' "
                        "(or plots=False / --no-plots for the tables alone)") from None
    # pylint: disable=import-outside-toplevel
    from tvm_icca.dse.report_plots import MAX_PANELS, axis_plot, pareto_plot

    written = []
    inputs = _inputs(table)
    # an axis varies within a workload (batch 8 of one model and 4 of another is no axis)
    by_workload: dict[str, list[dict[str, Any]]] = {}
    for row in table:
        by_workload.setdefault(str(row.get("workload")), []).append(row)
    varying = [n for n in _varying(table, inputs) if n not in _NOT_AXES
               and any(_varying(here, [n]) for here in by_workload.values())]
    designs = list(dict.fromkeys(str(r.get("design")) for r in table))
    plots, notes = _axes(table, varying)
    for axis, others, follow in plots:
        what = f"time per token against {axis}" + (
            f" (with {', '.join(follow)})" if follow else "")
        panels = len({_canon([r.get(o) for o in others]) for r in table})
        # one figure, or one per workload when that many panels would not fit one
        parts = [("", table)] if panels <= MAX_PANELS or len(by_workload) == 1 else [
            (f"_{name}", rows) for name, rows in by_workload.items()]
        for suffix, rows in parts:
            path = os.path.join(directory, _file_name(axis + suffix) + ".png")
            axis_plot(rows, axis, others, designs, path, follow=follow)
            written.append((path, what + (f", {suffix[1:]}" if suffix else
                                          ", one panel per workload")))
    for stem, (objective, column) in PARETO_PLOTS.items():
        have = [r for r in table if r.get("status") == OK and is_number(r.get(objective))
                and is_number(r.get("time_per_token_s"))]
        varies = any(len({r[objective] for r in have if r.get("workload_instance") == w}) > 1
                     for w in {r.get("workload_instance") for r in have})
        if have and (varies or column == "pareto"):
            path = os.path.join(directory, f"{stem}.png")
            pareto_plot(table, objective, column, inputs, path)
            written.append((path, f"Pareto front of time per token against {objective}"))
    return written, notes

