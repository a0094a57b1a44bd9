"""The plots of a DSE report (:func:`tvm_icca.dse.sweep_report.write_report`), drawn with
matplotlib from the results frame (:func:`tvm_icca.dse.columns.results_frame`).

What every plot keeps to, so that it reads at a glance:

* one panel per workload instance (and combination of the other swept inputs): points of two
  workloads are never on one line or one bar group;
* times per token (per sample for models without tokens: :func:`tvm_icca.workloads.tokens_per_run`),
  in the unit of the panel's largest value (``ms per token``); energies in J with an SI prefix;
  every axis named with its unit, bandwidths in B/s with an SI prefix (``TB/s``), byte counts in
  binary units (``MiB``), times in s, ms, us;
* a numeric input that spans 10x or more on a log axis, ticks at the values swept;
* a categorical input (a string: topology, HBM placement, a preset name) as grouped bars, one
  bar per design, never as a line; a design with one point in a panel is a marker, not a line;
* the bound of each point: its marker's shape names the resource whose floor is largest
  (``run_bound_by``), dashed lines (or, on bars, a dashed tick) give the floors per token;
* Pareto fronts (:mod:`tvm_icca.dse.pareto`): the front's points with a distinct marker, joined
  by the step line of the front, each labelled with the inputs that set it apart.
"""

from __future__ import annotations

import json
import math
from typing import Any, Sequence

from runtime_sim.contract.units import byte_unit, si_unit, time_unit
from runtime_sim.timing.floors import FLOOR_KEYS, bound_name
from tvm_icca.dse.columns import is_number
from tvm_icca.dse.gpu_points import GPU_DESIGN

__all__ = ["axis_plot", "pareto_plot", "input_unit", "per_item", "MAX_PANELS"]

#: Most panels of one figure; the rest are named in the figure's title (the table has all).
MAX_PANELS = 24
#: Colours of the floors, one per resource (FLOOR_KEYS order).
FLOOR_COLOURS = dict(zip(FLOOR_KEYS, ("tab:olive", "tab:green", "tab:red", "tab:brown",
                                      "tab:purple", "tab:orange", "tab:pink", "tab:gray",
                                      "tab:cyan", "tab:blue")))
#: Marker of each bound resource (``run_bound_by``), so a point's shape names its bound.
BOUND_MARKERS = dict(zip([bound_name(k) for k in FLOOR_KEYS], "os^vDPX<>p"))
#: Ratio of largest to smallest value from which an axis is logarithmic.
LOG_SPAN = 10.0


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def input_unit(name: str, values: Sequence[Any]) -> tuple[str, float]:
    """The unit an input's axis is labelled in, from the HardwareSpec naming conventions
    (``*_bandwidth`` in B/s, ``*bytes*`` in bytes, ``*_s`` in seconds, ``*_hz`` in Hz): ``(unit
    name, value of one unit)``, chosen from the largest value; ``("", 1.0)`` for counts and
    other inputs."""
    numbers = [abs(float(v)) for v in values if is_number(v)]
    top = max(numbers, default=0.0)
    if name.endswith("_bandwidth"):
        return si_unit(top, "B/s")
    if "bytes" in name:
        unit, size = byte_unit(top)
        return unit, float(size)
    if name.endswith("_s"):
        return time_unit(top)
    if name.endswith("_hz"):
        return si_unit(top, "Hz")
    return "", 1.0


def _value_text(name: str, value: Any, unit: tuple[str, float] | None = None) -> str:
    """An input value as a label shows it: ``16 TB/s``, ``624 KiB``, ``mesh``."""
    if not is_number(value):
        return str(value) if not isinstance(value, (dict, list)) else _canon(value)
    unit = unit or input_unit(name, [value])
    number = value / unit[1]
    text = f"{number:.4g}"
    return f"{text} {unit[0]}" if unit[0] else text


def per_item(rows: Sequence[dict[str, Any]]) -> str:
    """``token`` for LLMs, ``sample`` for the other zoo models, ``run`` without tokens."""
    # pylint: disable=import-outside-toplevel
    from tvm_icca.workloads import workload_info

    if not rows or not all(is_number(r.get("time_per_token_s")) for r in rows):
        return "run"
    try:
        return "token" if workload_info(str(rows[0].get("workload"))).get("phases") else "sample"
    except Exception:  # pylint: disable=broad-except  # a name the zoo no longer has
        return "token"


def _time(row: dict[str, Any], per: str, key: str = "total_s", scale: float = 1.0
          ) -> float | None:
    """``key`` (a time per run) per token when the panel is per token, in units of ``scale``
    seconds (the axis' unit: values are drawn in it, so the ticks fall on round numbers)."""
    value = row.get(key)
    if not is_number(value):
        return None
    if per == "run":
        return float(value) / scale
    tokens = row.get("tokens_per_run")
    return float(value) / float(tokens) / scale if is_number(tokens) and tokens > 0 else None


def _panels(rows: Sequence[dict[str, Any]], others: Sequence[str]
            ) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """The rows grouped by the values of ``others`` (the workload always among them)."""
    groups: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    for row in rows:
        values = {o: row.get(o) for o in others}
        groups.setdefault(_canon(values), (values, []))[1].append(row)
    return [groups[k] for k in sorted(groups, key=lambda k: [_sort_key(v)
                                                             for v in groups[k][0].values()])]


def _sort_key(value: Any) -> tuple:
    if is_number(value):
        return (0, float(value), "")
    return (1, 0.0, _canon(value))


def _title(values: dict[str, Any]) -> str:
    head = str(values.get("workload", ""))
    rest = ", ".join(f"{k}={_value_text(k, v)}" for k, v in values.items()
                     if k != "workload" and v is not None)
    return f"{head}\n{rest}" if rest else head


def _figure(count: int, width: float = 5.0, height: float = 3.8) -> tuple[Any, Any, int]:
    from matplotlib.figure import Figure  # pylint: disable=import-outside-toplevel

    ncols = min(3, max(count, 1))
    nrows = math.ceil(max(count, 1) / ncols)
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    return fig, fig.subplots(nrows, ncols, squeeze=False), ncols


def _log_ticks(ax: Any, which: str, values: Sequence[float]) -> None:
    """A log axis whose ticks are the values swept (at most 8 of them), as plain numbers."""
    # pylint: disable=import-outside-toplevel
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    shown = sorted(set(values))
    if len(shown) > 8:  # keep them apart: every n-th
        step = math.ceil(len(shown) / 8)
        shown = shown[::step]
    axis.set_major_locator(FixedLocator(shown))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:.4g}"))
    axis.set_minor_locator(NullLocator())


def _spans(values: Sequence[float]) -> bool:
    positive = [v for v in values if v > 0]
    return len(positive) >= 2 and max(positive) / min(positive) >= LOG_SPAN


def _unit_axis(ax: Any, which: str, values: Sequence[float]) -> None:
    """A measured value's axis (values already in its unit): logarithmic when they span 10x,
    ticks at 1, 2 and 5 of each decade (a measured value has too many values to tick each)."""
    # pylint: disable=import-outside-toplevel
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    axis = ax.xaxis if which == "x" else ax.yaxis
    if _spans(values):
        (ax.set_xscale if which == "x" else ax.set_yscale)("log")
        axis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 5.0)))
        axis.set_minor_locator(NullLocator())
        axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:.4g}"))


def _bound_legend(ax: Any, bounds: set[str]) -> list[Any]:
    from matplotlib.lines import Line2D  # pylint: disable=import-outside-toplevel

    return [Line2D([], [], color="black", marker=BOUND_MARKERS.get(b, "o"), linestyle="none",
                   markerfacecolor="none", label=f"bound by {b}") for b in sorted(bounds)]


def axis_plot(rows: Sequence[dict[str, Any]], axis: str, others: Sequence[str],
              designs: Sequence[str], path: str, follow: Sequence[str] = ()) -> Any:
    """Time per token against one swept input: lines over a numeric input, grouped bars over
    a categorical one; one panel per combination of ``others`` (the workload among them).
    ``follow``: inputs that move with the axis (one value for each of its values), named in
    its tick labels. Saves the figure to ``path`` and returns it (a
    :class:`matplotlib.figure.Figure`); one legend for the whole figure, below the panels."""
    values = [r.get(axis) for r in rows]
    numeric = all(is_number(v) for v in values if v is not None)
    panels = _panels(rows, others)
    shown = panels[:MAX_PANELS]
    fig, axes, ncols = _figure(len(shown))
    colours = {d: f"C{i % 10}" for i, d in enumerate(designs)}
    legend: dict[str, Any] = {}  # label -> handle, over every panel
    for index, (fixed, here) in enumerate(shown):
        ax = axes[index // ncols][index % ncols]
        ax.set_title(_title(fixed), fontsize=9)
        ok = [r for r in here if r.get("status") == "ok" and is_number(r.get("total_s"))]
        if not ok:
            ax.text(0.5, 0.5, "no point fits or ran\n(see the table)", ha="center", va="center",
                    transform=ax.transAxes)
            ax.set_axis_off()
            continue
        per = per_item(ok)
        times = [t for t in (_time(r, per) for r in ok) if t is not None]
        unit = time_unit(max(times))
        if numeric:
            handles = _numeric_panel(ax, ok, axis, designs, colours, per, unit[1], follow)
            _unit_axis(ax, "y", [t / unit[1] for t in times if t > 0])
        else:
            handles = _bar_panel(ax, ok, axis, designs, colours, per, unit[1], follow)
        ax.set_ylabel(f"time per {per} ({unit[0]})")
        ax.grid(True, alpha=0.3)
        for handle in handles:
            legend.setdefault(handle.get_label(), handle)
    for index in range(len(shown), len(axes) * ncols):
        axes[index // ncols][index % ncols].set_visible(False)
    if legend:
        fig.legend(handles=list(legend.values()), loc="outside lower center",
                   ncols=min(len(legend), 6), fontsize=8)
    more = len(panels) - len(shown)
    fig.suptitle(f"time per token against {axis}" + (
        f" ({more} more panels in the table)" if more else ""))
    fig.savefig(path, dpi=110)
    return fig


def _tick_text(axis: str, value: Any, rows: Sequence[dict[str, Any]], follow: Sequence[str],
               unit: tuple[str, float] | None = None) -> str:
    """A tick's label: the axis value, and below it the inputs that move with it."""
    text = f"{value / unit[1]:.4g}" if unit and is_number(value) else _value_text(axis, value)
    row = next((r for r in rows if _canon(r.get(axis)) == _canon(value)), None)
    if row is None or not follow:
        return text
    return "\n".join([text, *(_value_text(n, row.get(n)) for n in follow)])


def _numeric_panel(ax: Any, ok: Sequence[dict[str, Any]], axis: str, designs: Sequence[str],
                   colours: dict[str, str], per: str, scale: float,
                   follow: Sequence[str] = ()) -> list[Any]:
    from matplotlib.lines import Line2D  # pylint: disable=import-outside-toplevel

    unit = input_unit(axis, [r.get(axis) for r in ok])
    xs_all = sorted({float(r[axis]) / unit[1] for r in ok if is_number(r.get(axis))})
    handles: list[Any] = []
    bounds: set[str] = set()
    for design in designs:
        mine = sorted((r for r in ok if str(r.get("design")) == design and is_number(r.get(axis))),
                      key=lambda r: float(r[axis]))
        if not mine:
            continue
        xs = [float(r[axis]) / unit[1] for r in mine]
        ys = [_time(r, per, scale=scale) for r in mine]
        if len(set(xs)) > 1:  # a line only between two or more values of the input
            ax.plot(xs, ys, color=colours[design], linewidth=1.2)
        for r, x, y in zip(mine, xs, ys):
            bound = str(r.get("run_bound_by", ""))
            bounds.add(bound)
            ax.plot([x], [y], linestyle="none", marker=BOUND_MARKERS.get(bound, "o"),
                    color=colours[design], markersize=6)
        handles.append(Line2D([], [], color=colours[design], marker="o", label=design))
    for key in FLOOR_KEYS:  # every floor that bounds a point: the least over the designs
        name = bound_name(key)
        if name not in bounds:
            continue
        best: dict[float, float] = {}
        for r in ok:
            value = _time(r, per, key, scale)
            if value is not None and value > 0 and is_number(r.get(axis)):
                x = float(r[axis]) / unit[1]
                best[x] = min(best.get(x, math.inf), value)
        if best:
            xs = sorted(best)
            ax.plot(xs, [best[x] for x in xs], linestyle="--", linewidth=1,
                    color=FLOOR_COLOURS[key], marker="_" if len(xs) == 1 else None,
                    markersize=14)
            handles.append(Line2D([], [], linestyle="--", color=FLOOR_COLOURS[key],
                                  label=f"{name} floor"))
    handles += _bound_legend(ax, bounds - {""})
    ax.set_xlabel(f"{axis} ({unit[0]})" if unit[0] else axis)
    if _spans(xs_all):
        _log_ticks(ax, "x", xs_all)
    elif len(xs_all) <= 8:  # the values swept as the ticks
        from matplotlib.ticker import FixedLocator, FuncFormatter  # pylint: disable=import-outside-toplevel
        ax.xaxis.set_major_locator(FixedLocator(xs_all))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:.4g}"))
    if follow and len(xs_all) <= 8:  # name what moves with each value under it
        values = {float(r[axis]) / unit[1]: r[axis] for r in ok if is_number(r.get(axis))}
        ax.set_xticks(xs_all, [_tick_text(axis, values[x], ok, follow, unit) for x in xs_all])
    return handles


def _bar_panel(ax: Any, ok: Sequence[dict[str, Any]], axis: str, designs: Sequence[str],
               colours: dict[str, str], per: str, scale: float,
               follow: Sequence[str] = ()) -> list[Any]:
    from matplotlib.lines import Line2D  # pylint: disable=import-outside-toplevel
    from matplotlib.patches import Patch  # pylint: disable=import-outside-toplevel

    categories = sorted({_canon(r.get(axis)): r.get(axis) for r in ok}.values(), key=_sort_key)
    present = [d for d in designs if any(str(r.get("design")) == d for r in ok)]
    width = 0.8 / max(len(present), 1)
    handles: list[Any] = [Patch(color=colours[d], label=d) for d in present]
    for c, category in enumerate(categories):
        for k, design in enumerate(present):
            row = next((r for r in ok if str(r.get("design")) == design
                        and _canon(r.get(axis)) == _canon(category)), None)
            if row is None:
                continue
            x = c - 0.4 + width * (k + 0.5)
            y = _time(row, per, scale=scale)
            if y is None:
                continue
            ax.bar([x], [y], width=width * 0.9, color=colours[design])
            floor = _time(row, per, "floor_s", scale)
            if floor is not None:
                ax.hlines(floor, x - width * 0.45, x + width * 0.45, colors="black",
                          linestyles="--", linewidth=1)
            bound = str(row.get("run_bound_by", ""))
            if bound:
                ax.annotate(bound, (x, y), xytext=(0, 2), textcoords="offset points",
                            ha="center", va="bottom", fontsize=6, rotation=90)
    handles.append(Line2D([], [], color="black", linestyle="--", label="floor (bound named above the bar)"))
    ax.set_xticks(range(len(categories)), [_tick_text(axis, c, ok, follow) for c in categories],
                  rotation=20 if len(categories) > 3 else 0)
    ax.set_xlabel(axis)
    ax.set_ylim(bottom=0, top=ax.get_ylim()[1] * 1.15)  # room for the bound names
    return handles


def _distinguishing(rows: Sequence[dict[str, Any]], inputs: Sequence[str]) -> list[str]:
    """The inputs that vary among ``rows`` (what sets one design apart from another)."""
    return [n for n in inputs if len({_canon(r.get(n)) for r in rows}) > 1]


def point_label(row: dict[str, Any], names: Sequence[str], units: dict[str, tuple[str, float]]
                ) -> str:
    """A point as its distinguishing inputs: ``hbm_bandwidth 16 TB/s, mesh, elk-full``."""
    parts = []
    for name in names:
        value = row.get(name)
        if value is None:  # not an input of this point (a GPU has no ICCA chip fields)
            continue
        if is_number(value):
            parts.append(f"{name} {_value_text(name, value, units.get(name))}")
        else:
            parts.append(_value_text(name, value))
    return ", ".join(parts)


def pareto_plot(rows: Sequence[dict[str, Any]], objective: str, front_column: str,
                inputs: Sequence[str], path: str) -> Any:
    """Time per token against ``objective`` (energy per token, or a cost proxy), one panel per
    workload instance: every point, the Pareto front's points with a star joined by the
    front's step line, each front point labelled with the inputs that set it apart. Saves the
    figure to ``path`` and returns it."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row.get("status") == "ok" and is_number(row.get("time_per_token_s")) \
                and is_number(row.get(objective)):
            groups.setdefault(str(row.get("workload_instance")), []).append(row)
    keys = sorted(groups)[:MAX_PANELS]
    fig, axes, ncols = _figure(len(keys), width=6.0, height=4.6)
    for index, key in enumerate(keys):
        ax = axes[index // ncols][index % ncols]
        here = groups[key]
        instance = json.loads(key)
        ax.set_title(_title(instance), fontsize=9)
        per = per_item(here)
        xunit = time_unit(max(float(r["time_per_token_s"]) for r in here))
        yunit = _objective_unit(objective, [float(r[objective]) for r in here])
        xs = [float(r["time_per_token_s"]) / xunit[1] for r in here]  # drawn in the axis' unit
        ys = [float(r[objective]) / yunit[1] for r in here]
        front = [bool(r.get(front_column)) for r in here]
        ax.scatter([x for x, f in zip(xs, front) if not f], [y for y, f in zip(ys, front) if not f],
                   color="tab:gray", alpha=0.6, s=18, label="dominated")
        points = sorted(((x, y, r) for x, y, r, f in zip(xs, ys, here, front) if f),
                        key=lambda p: (p[0], p[1]))
        ax.step([p[0] for p in points], [p[1] for p in points], where="post", color="tab:red",
                linewidth=1.2, label="Pareto front")
        ax.scatter([p[0] for p in points], [p[1] for p in points], marker="*", s=140,
                   color="tab:red", edgecolors="black", linewidths=0.6, zorder=3,
                   label="Pareto-optimal")
        names = _distinguishing(here, [n for n in inputs if n not in instance])
        units = {n: input_unit(n, [r.get(n) for r in here]) for n in names}
        # the GPUs a design must beat are named wherever they fall, front or not
        gpus = [(x, y, r) for x, y, r, f in zip(xs, ys, here, front)
                if r.get("design") == GPU_DESIGN and not f]
        if gpus:
            ax.scatter([g[0] for g in gpus], [g[1] for g in gpus], marker="D", s=30,
                       color="tab:blue", zorder=3, label="GPU estimate")
        middle = (min(xs) + max(xs)) / 2
        for k, (x, y, r) in enumerate(points + gpus):  # above and below in turn
            text = (str(r.get("hardware")) if r.get("design") == GPU_DESIGN
                    else point_label(r, names, units) or str(r.get("design", "")))
            left = x > middle  # labels of the right half run leftwards, inside the axes
            ax.annotate(text, (x, y), xytext=(-7 if left else 7, 5 if k % 2 == 0 else -11),
                        textcoords="offset points", fontsize=7, ha="right" if left else "left")
        ax.set_xlabel(f"time per {per} ({xunit[0]})")
        ax.set_ylabel(_objective_label(objective, yunit, per))
        _unit_axis(ax, "x", xs)
        _unit_axis(ax, "y", ys)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    for index in range(len(keys), len(axes) * ncols):
        axes[index // ncols][index % ncols].set_visible(False)
    fig.suptitle(f"Pareto front: time against {_objective_label(objective, None)}\n"
                 "(lower is better in both)", fontsize=10)
    fig.savefig(path, dpi=110)
    return fig


def _objective_unit(objective: str, values: Sequence[float]) -> tuple[str, float]:
    if objective.endswith("_j"):
        return si_unit(max(values), "J")
    if "bytes" in objective:
        unit, size = byte_unit(max(values))
        return unit, float(size)
    return "", 1.0


def _objective_label(objective: str, unit: tuple[str, float] | None, per: str = "token") -> str:
    words = {"energy_per_token_j": f"energy per {per}", "system_sram_bytes": "SRAM of the system"}
    text = words.get(objective, objective)
    return f"{text} ({unit[0]})" if unit and unit[0] else text

