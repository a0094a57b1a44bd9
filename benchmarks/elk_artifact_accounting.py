"""How the public Elk artifact turns a run's timeline into Elk Fig. 18a's four bars.

The artifact's ``benchmark_scripts/overlap_calc.py`` (``get_breakdown_stats_percentage``, run
with ``mod=True`` by ``draw_exec_breakdown_groupings.py``) does two things our own breakdown
(``preload_only_s``, ``execute_only_s``, ``preload_overlap_s`` of the timing report) does not:

1. **Per-interval weighting** (:func:`interval_breakdown`): it walks the load intervals and the
   execution intervals together and, in each stretch of time, counts as *overlapped* only the
   product of the share of the load spent at HBM (the operator's HBM bytes over the bandwidth,
   over its load interval) and the share of the execution spent computing and shifting (over its
   execution interval); the rest of the load share is *preload*, the rest of the compute share
   *execute*, and what is left of the run *interconnect*.
2. **Figure adjustments** (:func:`figure_adjustments`): Basic gains (its preload cycles) ** 0.9
   cycles of overlap, taken from its execute time; every design but Elk-Full gains 2 x 0.9 times
   its interconnect time as more interconnect, taken from its overlap (Basic: from its execute
   time). Cycles at the artifact's IPU clock, 1.325 GHz.

Both are reproduced here from the artifact's arithmetic (facts, not its code) so that our runs
can be drawn the way the paper's figure was.
"""

from __future__ import annotations

from typing import Any, Iterable

#: The artifact's clock (``IPU_Mk2_cycle_to_ms``: cycles / 1.325e6 per ms).
ARTIFACT_FIGURE_CLOCK_HZ = 1.325e9
#: Basic's load-only cycles are raised to this power and moved to its overlap.
ARTIFACT_FIGURE_LOAD_EXPONENT = 0.9
#: ``2 * double_buffer_space_ratio`` (0.9): the interconnect time added to every design but Elk-Full.
ARTIFACT_FIGURE_NOC_FACTOR = 2 * 0.9
#: The four categories of Elk Fig. 18a.
CATEGORIES = ("preload", "execute", "overlap", "interconnect")


def figure_adjustments(parts: dict[str, float], design: str) -> dict[str, float]:
    """``parts`` (seconds per category) as the artifact's figure draws them for ``design``."""
    cyc = {k: v * ARTIFACT_FIGURE_CLOCK_HZ for k, v in parts.items()}
    if design == "basic":
        moved = cyc["preload"] ** ARTIFACT_FIGURE_LOAD_EXPONENT
        cyc["execute"] -= moved
        cyc["overlap"] += moved
    if design != "elk-full":
        moved = ARTIFACT_FIGURE_NOC_FACTOR * cyc["interconnect"]
        cyc["execute" if design == "basic" else "overlap"] -= moved
        cyc["interconnect"] += moved
    return {k: v / ARTIFACT_FIGURE_CLOCK_HZ for k, v in cyc.items()}


def ratio_of_sums(rows: list[dict[str, Any]], field: str, num: str, den: str) -> float | None:
    """Design ``num``'s ``field`` summed over ``rows`` (one per model) over design ``den``'s: how
    Elk Fig. 18a's ratios between designs (e.g. Static's overlap over Basic's) are averaged
    here (``None`` when either is missing or the denominator is zero)."""
    a = [r[field] for r in rows if r["design"] == num and field in r]
    b = [r[field] for r in rows if r["design"] == den and field in r]
    return sum(a) / sum(b) if a and b and sum(b) > 0 else None


def _busy_share(intervals: list[tuple[float, float, float]], a: float, b: float) -> float:
    """The busy share (capped at 1) of the intervals ``(start, end, busy_s)`` covering ``[a, b]``."""
    share = sum(min(1.0, busy / (end - start)) for start, end, busy in intervals
                if start <= a and end >= b and end > start)
    return min(1.0, share)


def interval_breakdown(per_op: Iterable[Any], hbm_bandwidth: float, total_s: float
                       ) -> dict[str, float]:
    """A run's four categories (seconds) weighted per interval as the artifact weights them.

    ``per_op``: the timing report's operators (``start_s``/``end_s``, ``compute_s`` +
    ``transfer_s`` busy; ``load_start_s``/``load_end_s``, ``hbm_bytes`` at ``hbm_bandwidth``
    busy). Where the artifact's walk assumes one load and one execution at a time, overlapping
    intervals of one kind add their shares (capped at 1)."""
    ops = list(per_op)
    execs = [(o.start_s, o.end_s, o.compute_s + o.transfer_s) for o in ops if o.end_s > o.start_s]
    loads = [(o.load_start_s, o.load_end_s, o.hbm_bytes / hbm_bandwidth) for o in ops
             if o.load_end_s > o.load_start_s and hbm_bandwidth > 0]
    cuts = sorted({t for start, end, _ in execs + loads for t in (start, end)})
    overlap = preload = execute = 0.0
    for a, b in zip(cuts, cuts[1:]):
        hbm, compute = _busy_share(loads, a, b), _busy_share(execs, a, b)
        overlap += hbm * compute * (b - a)
        preload += (hbm - hbm * compute) * (b - a)
        execute += (compute - hbm * compute) * (b - a)
    return {"preload": preload, "execute": execute, "overlap": overlap,
            "interconnect": max(0.0, total_s - preload - execute - overlap)}
