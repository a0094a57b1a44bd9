"""The T10 and Elk papers' headline results beside ours (issue 38).

Every number the T10 paper (SOSP'24, §6.2-§6.8) and the Elk paper (MICRO'25, §5, §6.2-§6.4)
report for a workload this project can run is listed with the figure we measure for it, read
from the committed results files of the other scripts in ``benchmarks/`` (their commands and
commits are named below the table). A difference of more than 25% carries its cause, and the
cause points at the measurement that shows it (an ablation, a breakdown, a changed setting),
never at an assertion. Results the papers give that no script here can reproduce are listed
with the reason.

    .venv/bin/python benchmarks/paper_results.py

writes ``benchmarks/results/paper_results.{md,json}``; the documentation's page "Reproducing
T10 and Elk" (``docs/reproducing_papers.md``) shows the table.
"""

from __future__ import annotations

import json
import math
import pathlib
import statistics
from dataclasses import dataclass
from typing import Any, Callable

from elk_artifact_accounting import figure_adjustments, ratio_of_sums  # benchmarks/, beside this script
from result_files import write_json, write_markdown

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DSE_RESULTS = ROOT / "benchmarks" / "dse" / "results"
#: A difference beyond this share of the paper's figure needs a measured cause (issue 38).
TOLERANCE = 0.25
LLMS = ("llama2-13b", "gemma2-27b", "opt-30b", "llama2-70b")


class Sources:
    """The committed results files, read once each."""

    def __init__(self, results: pathlib.Path = RESULTS, dse: pathlib.Path = DSE_RESULTS):
        self.results, self.dse = results, dse
        self._cache: dict[str, Any] = {}

    def json(self, name: str) -> Any:
        if name not in self._cache:
            path = self.results / name
            self._cache[name] = json.loads(path.read_text()) if path.is_file() else None
        return self._cache[name]

    def jsonl(self, study: str) -> list[dict[str, Any]]:
        if study not in self._cache:
            path = self.dse / f"{study}.jsonl"
            rows = []
            if path.is_file():
                rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            self._cache[study] = [r for r in rows if r.get("status") == "ok"]
        return self._cache[study]

    def elk_llm(self) -> list[dict[str, Any]]:
        data = self.json("elk_llm.json") or {}
        return [r for r in data.get("main", []) if r.get("model") in LLMS]

    def t10_vs_vgm(self) -> list[dict[str, Any]]:
        data = self.json("t10_vs_vgm.json")
        rows = data.get("rows", []) if isinstance(data, dict) else (data or [])
        return [r for r in rows if "t10_total_s" in r]


@dataclass(frozen=True)
class Claim:
    """One headline number of a paper and how we measure the same quantity.

    ``ours`` computes our figure from :class:`Sources` (``None`` when the results file does
    not have it yet); ``cause`` is the measured reason for a difference beyond
    :data:`TOLERANCE`, naming the results file or section that shows the measurement: a
    template :func:`compare` fills with :func:`facts` and the claim's values under the Elk
    artifact's costs (``{narrow}``, ``{wide}``)."""

    key: str
    where: str  # paper and section / figure
    what: str
    paper: float
    unit: str  # "x", "%", "count", "TB/s", "TFLOPS", "s"
    source: str  # the results file(s) ours is computed from
    ours: Callable[[Sources], float | None]
    cause: str = ""


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def _design(rows: list[dict[str, Any]], model: str, design: str) -> dict[str, Any] | None:
    return next((r for r in rows if r["model"] == model and r["design"] == design), None)


def _over(src: Sources, better: str, worse: str, agg: Callable[[list[float]], float] = statistics.fmean):
    """Elk §6.2's "X outperforms Y by": Y's time over X's, over the four LLMs."""
    rows = src.elk_llm()
    xs = []
    for m in LLMS:
        b, w = _design(rows, m, better), _design(rows, m, worse)
        if b and w:
            xs.append(w["total_ms"] / b["total_ms"])
    return agg(xs) if xs else None


def _of_ideal(src: Sources) -> float | None:
    """Elk-Full's share of Ideal's performance (Ideal's time over Elk-Full's), over the LLMs."""
    rows = src.elk_llm()
    pairs = [(_design(rows, m, "ideal"), _design(rows, m, "elk-full")) for m in LLMS]
    return _mean([100.0 * i["total_ms"] / f["total_ms"] for i, f in pairs if i and f])


def _design_mean(src: Sources, design: str, field: str, scale: float = 100.0) -> float | None:
    rows = [r for r in src.elk_llm() if r["design"] == design and field in r]
    return _mean([r[field] * scale for r in rows])


def _vgm_speedups(src: Sources) -> list[float]:
    return [r["vgm_total_s"] / r["t10_total_s"] for r in src.t10_vs_vgm()
            if r.get("vgm_fits") and r.get("vgm_total_s")]


def _share(rows: list[dict[str, Any]], which: str) -> list[float]:
    return [100.0 * r[f"{which}_transfer_s"] / r[f"{which}_total_s"] for r in rows
            if r.get(f"{which}_total_s") and r.get("vgm_fits")]


def _removed_contention(src: Sources) -> float | None:
    rows = src.elk_llm()
    dyn = sum(r.get("interconnect_stall_s", 0.0) for r in rows if r["design"] == "elk-dyn")
    full = sum(r.get("interconnect_stall_s", 0.0) for r in rows if r["design"] == "elk-full")
    # reordering never adds contention; a float residue below zero is zero
    return max(0.0, 100.0 * (1.0 - full / dyn)) if dyn > 0 else None


def breakdown(row: dict[str, Any]) -> dict[str, float]:
    """A run's time in Elk Fig. 18a's four categories (seconds): preload only, execute only,
    overlapped, and interconnect (the rest of the total, as the artifact defines it)."""
    total = row["total_ms"] / 1e3
    parts = {"preload": row["preload_only_s"], "execute": row["execute_only_s"],
             "overlap": row["preload_overlap_s"]}
    return {**parts, "interconnect": max(0.0, total - sum(parts.values()))}


def artifact_figure_breakdown(parts: dict[str, float], design: str) -> dict[str, float]:
    """``parts`` (:func:`breakdown`) as the Elk artifact's breakdown figures would draw them for
    ``design`` (:func:`elk_artifact_accounting.figure_adjustments`)."""
    return figure_adjustments(parts, design)


def _figure_accounting(src: Sources, design: str, better: str, category: str) -> list[float]:
    """Per LLM: ``design``'s ``category`` over ``better``'s, both under the artifact's figure
    accounting."""
    rows = src.elk_llm()
    out = []
    for m in LLMS:
        a, b = _design(rows, m, design), _design(rows, m, better)
        if a and b:
            x = artifact_figure_breakdown(breakdown(a), design)[category]
            y = artifact_figure_breakdown(breakdown(b), better)[category]
            if y > 0:
                out.append(x / y)
    return out


def _non_overlapped(src: Sources) -> float | None:
    rows = [r for r in src.elk_llm() if r["design"] == "elk-full"]
    return _mean([100.0 * r["preload_only_s"] / (r["total_ms"] / 1e3) for r in rows])


def _achieved_tflops(src: Sources) -> float | None:
    return _design_mean(src, "elk-full", "achieved_flops", 1e-12)


def _fig23_over(src: Sources, worse: str) -> float | None:
    """Elk-Full's mean speed-up over ``worse`` across core counts, LLMs, all-to-all (Fig. 23)."""
    rows = [r for r in src.jsonl("elk_fig23_cores") if r["topology"] == "all-to-all"]
    at = {(r["workload"], r["num_cores"], r["design"]): r["total_s"] for r in rows}
    xs = [at[(w, n, worse)] / t for (w, n, d), t in at.items()
          if d == "elk-full" and (w, n, worse) in at]
    return _mean(xs)


def _hbm_bound_until(src: Sources, model: str = "llama2-70b", slack: float = 1.10) -> float | None:
    """The lowest HBM bandwidth (TB/s) at which Elk-Full is more than ``slack`` x its HBM
    floor on the all-to-all chip: where the model stops being HBM-bound (Elk §6.4 (1))."""
    rows = sorted((r for r in src.jsonl("elk_fig19_21_hbm") if r["workload"] == model
                   and r["design"] == "elk-full" and r["topology"] == "all-to-all"),
                  key=lambda r: r["hbm_bandwidth"])
    for r in rows:
        if r["total_s"] > slack * r["hbm_floor_s"]:
            return r["hbm_bandwidth"] / 1e12
    return None


def _fig22_elk_full(src: Sources, hbm: float = 8e12) -> list[dict[str, Any]]:
    """Llama2-70B's Elk-Full rows of Fig. 22 at ``hbm`` B/s of HBM, all-to-all, by link
    bandwidth."""
    return sorted((r for r in src.jsonl("elk_fig22_noc") if r["design"] == "elk-full"
                   and r["topology"] == "all-to-all" and r["hbm_bandwidth"] == hbm),
                  key=lambda r: r["link_bandwidth"])


def _noc_saturates(src: Sources, hbm: float = 8e12, gain: float = 0.02) -> float | None:
    """The aggregate interconnect bandwidth (TB/s) beyond which Llama2-70B's Elk-Full time
    improves by less than ``gain`` at 8 TB/s of HBM, all-to-all (Elk §6.4 (2), Fig. 22)."""
    rows = _fig22_elk_full(src, hbm)
    for lo, hi in zip(rows, rows[1:]):
        if lo["total_s"] / hi["total_s"] - 1.0 < gain:
            return lo["link_bandwidth"] * lo.get("num_cores", 5888) / 1e12
    return None


def _training_tflops(src: Sources, hbm: float = 400e9) -> float | None:
    """The largest achieved TFLOPS of Llama2-13B's training forward with 400 GB/s of HBM, Elk-Full,
    all-to-all (Elk §6.4 (4), Fig. 24)."""
    rows = [r for r in src.jsonl("elk_fig24_training") if r["design"] == "elk-full"
            and r["topology"] == "all-to-all" and r["hbm_bandwidth"] == hbm]
    return max((r["achieved_flops"] / 1e12 for r in rows), default=None)


def _elk_compile(src: Sources) -> float | None:
    rows = (src.json("elk_llm_compile.json") or {}).get("compile", [])
    return max((r["compile_s"] for r in rows), default=None)


def _ops(src: Sources, model: str) -> float | None:
    rows = (src.json("elk_llm_compile.json") or {}).get("compile", [])
    return next((float(r["ops"]) for r in rows if r["model"] == model), None)


#: The settings of ``benchmarks/elk_paper_gap.py`` whose rows bracket the Elk artifact's decode
#: matmul cost (narrow and wide tiles): Elk claims are also computed under them.
ARTIFACT_SETTINGS = ("artifact-both", "artifact-both-wide")


class _GapSources(Sources):
    """:class:`Sources` whose LLM decode rows are one setting of ``elk_paper_gap.json``."""

    def __init__(self, base: Sources, setting: str):
        super().__init__(base.results, base.dse)
        self._cache = base._cache
        self.setting = setting

    def elk_llm(self) -> list[dict[str, Any]]:
        rows = (self.json("elk_paper_gap.json") or {}).get(self.setting, [])
        return [r for r in rows if r.get("model") in LLMS and r.get("total_ms")]


def facts(src: Sources) -> dict[str, str]:
    """Measured quantities the causes quote, formatted (``"?"`` where a file lacks them)."""
    out: dict[str, str] = {}

    def put(name: str, fn: Callable[[], float | None], fmt: str) -> None:
        try:
            v = fn()
        except (KeyError, TypeError, ZeroDivisionError, ValueError, StopIteration, IndexError):
            v = None
        out[name] = "?" if v is None else format(v, fmt)

    rows = src.elk_llm()
    both = [r for r in src.t10_vs_vgm() if r.get("vgm_fits")]
    ablation = (src.json("t10_share_ablation.json") or {}).get("rows", [])
    for key, label in (("narrow", "artifact narrow tile"), ("wide", "artifact wide tile")):
        shares = [r["transfer_share"] for r in ablation if r["setting"] == label]
        out[f"t10_share_{key}"] = (f"{100 * min(shares):.1f}-{100 * max(shares):.1f}%"
                                   if shares else "?")
        put(f"eff_{key}", lambda label=label: 100 * next(
            r["efficiency"] for r in ablation if r["setting"] == label), ".0f")
    put("vgm_transfer_x", lambda: _mean([r["vgm_transfer_s"] / r["t10_transfer_s"] for r in both]), ".1f")
    put("vgm_compute_x", lambda: _mean([r["vgm_compute_s"] / r["t10_compute_s"] for r in both]), ".1f")
    put("small_batch", lambda: _mean([r["vgm_total_s"] / r["t10_total_s"] for r in both
                                      if r["batch"] <= 8]), ".2f")
    put("dyn_stall", lambda: max(100 * r["interconnect_stall_s"] / (r["total_ms"] / 1e3)
                                 for r in rows if r["design"] == "elk-dyn"), ".2f")
    put("ideal_over_floor", lambda: _mean([r["total_ms"] / r["hbm_floor_ms"] for r in rows
                                           if r["design"] == "ideal"]), ".2f")
    def removed() -> list[float]:
        return [100.0 * (1.0 - x)
                for x in _figure_accounting(src, "elk-full", "elk-dyn", "interconnect")]

    put("acct_removed_low", lambda: min(removed()), ".0f")
    put("acct_removed_high", lambda: max(removed()), ".0f")
    if out["acct_removed_low"] == out["acct_removed_high"]:
        out["acct_removed"] = out["acct_removed_low"]
    else:
        out["acct_removed"] = f"{out['acct_removed_low']}-{out['acct_removed_high']}"
    put("basic_overlap", lambda: _mean([100 * r["preload_overlap_s"] / (r["total_ms"] / 1e3)
                                        for r in rows if r["design"] == "basic"]), ".0f")
    overlap_rows = (src.json("elk_overlap.json") or {}).get("rows", [])
    basic_rows = [r for r in overlap_rows if r["design"] == "basic"]
    out["basic_early"] = (f"{sum(r['loads_during_previous_execution'] for r in basic_rows):,} of "
                          f"{sum(r['loads'] for r in basic_rows):,}" if basic_rows else "?")
    put("basic_sram", lambda: 100 * statistics.median(
        r["execute_sram_share_median"] for r in basic_rows), ".1f")
    put("basic_sram_max", lambda: 100 * max(r["execute_sram_share_max"] for r in basic_rows), ".0f")

    put("weighted_overlap",
        lambda: ratio_of_sums(overlap_rows, "weighted_overlap_ms", "static", "basic"), ".2f")
    put("figure_overlap",
        lambda: ratio_of_sums(overlap_rows, "figure_overlap_ms", "static", "basic"), ".2f")
    put("exposed_opt", lambda: next(100 * r["preload_only_s"] / (r["total_ms"] / 1e3) for r in rows
                                    if r["design"] == "elk-full" and r["model"] == "opt-30b"), ".1f")
    fig22 = _fig22_elk_full(src)
    put("fig22_low", lambda: fig22[0]["total_s"] / fig22[0]["hbm_floor_s"], ".3f")
    compile_rows = (src.json("elk_llm_compile.json") or {}).get("compile", [])
    put("orders_70b", lambda: next(r["orders_tried"] for r in compile_rows
                                   if r["model"] == "llama2-70b"), "d")
    gran = {r["model"]: r for r in (src.json("op_granularity.json") or {}).get("rows", [])}
    put("relax_per_layer", lambda: gran["llama2-13b"]["relax_ops_per_layer"], "d")
    put("device_per_layer", lambda: gran["llama2-13b"]["device_ops_per_layer"], "d")
    return out


_T10_VGM = ("T10's compute-shift plans beat our VGM by more than the paper's: the VGM moves "
            "{vgm_transfer_x}x T10's transfer time and computes {vgm_compute_x}x as long (padded "
            "small tiles, a sync per load-compute step); at batch <= 8, where an operator has "
            "fewer tiles than cores, the mean is {small_batch}x. The VGM is Roller-like with "
            "reuse, multicast and an exhaustive tile search (the ablation in `t10_vs_vgm.md`); "
            "Poplar's per-step overheads on hardware, which would shrink the ratio, are not "
            "modelled (`t10_vs_vgm.md`, against T10 §6.2).")
_T10_SHARE = ("Our simulator runs every matmul sub-task at the matrix unit's peak, which a real "
              "IPU's codelets do not reach, so compute is short beside the transfers. With the "
              "matrix unit at the efficiency the Elk artifact's fitted IPU cost gives a matmul tile, "
              "T10's transfer share is {t10_share_narrow} (narrow tile, {eff_narrow}% of peak) and "
              "{t10_share_wide} (wide tile, {eff_wide}%) on the same configurations, bracketing "
              "the paper's 8-43% (`t10_share_ablation.md`). Our T10 moves {vgm_transfer_x}x less "
              "transfer time than our VGM (`t10_vs_vgm.md`).")
_ELK_DECODE = ("Our cores run a decode matmul tile (32 rows) at the matrix unit's peak, so "
               "execution is faster than loading and every good design sits at the HBM floor "
               "(Ideal at {ideal_over_floor}x the HBM floor; the paper's Ideal at 1.55x). Under "
               "the Elk artifact's transfer and decode matmul costs ours is {narrow}-{wide} "
               "(narrow-wide tile; `elk_paper_gap.md`).")

CLAIMS: tuple[Claim, ...] = (
    # -- T10 (SOSP'24) -------------------------------------------------------------------
    Claim("t10_over_vgm_mean", "T10 §6.2, Fig. 12", "T10's mean speed-up over the VGM compilers "
          "(Roller, Ansor), where both run", 1.69, "x", "t10_vs_vgm.json",
          lambda s: _mean(_vgm_speedups(s)), _T10_VGM),
    Claim("t10_over_vgm_max", "T10 §6.2, Fig. 12", "T10's largest speed-up over the VGM compilers",
          3.3, "x", "t10_vs_vgm.json", lambda s: max(_vgm_speedups(s), default=None), _T10_VGM),
    Claim("vgm_transfer_min", "T10 §6.2, Fig. 13", "VGM: inter-core transfer share of the time, "
          "lowest", 50.0, "%", "t10_vs_vgm.json",
          lambda s: min(_share(s.t10_vs_vgm(), "vgm"), default=None),
          "The lowest share is NeRF at batch 1, whose small operators keep the VGM's compute "
          "(padded tiles, a sync per step) long beside its transfers (`t10_vs_vgm.md`)."),
    Claim("vgm_transfer_max", "T10 §6.2, Fig. 13", "VGM: inter-core transfer share, highest",
          74.0, "%", "t10_vs_vgm.json",
          lambda s: max(_share(s.t10_vs_vgm(), "vgm"), default=None), _T10_SHARE),
    Claim("t10_transfer_min", "T10 §6.2, Fig. 13", "T10: inter-core transfer share, lowest",
          8.0, "%", "t10_vs_vgm.json",
          lambda s: min(_share(s.t10_vs_vgm(), "t10"), default=None), _T10_SHARE),
    Claim("t10_transfer_max", "T10 §6.2, Fig. 13", "T10: inter-core transfer share, highest",
          43.0, "%", "t10_vs_vgm.json",
          lambda s: max(_share(s.t10_vs_vgm(), "t10"), default=None), _T10_SHARE),
    # -- Elk (MICRO'25) ------------------------------------------------------------------
    Claim("elk_over_basic", "Elk §6.2, Fig. 17", "Elk-Full's mean speed-up over Basic (LLM "
          "decode, 4 chips, 16 TB/s HBM)", 1.87, "x", "elk_llm.json",
          lambda s: _over(s, "elk-full", "basic"), _ELK_DECODE),
    Claim("elk_over_basic_max", "Elk §6.2, Fig. 17", "Elk-Full's largest speed-up over Basic",
          1.93, "x", "elk_llm.json", lambda s: _over(s, "elk-full", "basic", max), _ELK_DECODE),
    Claim("elk_over_static", "Elk §6.2, Fig. 17", "Elk-Full's mean speed-up over Static", 1.37,
          "x", "elk_llm.json", lambda s: _over(s, "elk-full", "static"), _ELK_DECODE),
    Claim("elk_over_static_max", "Elk §6.2, Fig. 17", "Elk-Full's largest speed-up over Static",
          1.49, "x", "elk_llm.json", lambda s: _over(s, "elk-full", "static", max), _ELK_DECODE),
    Claim("elk_of_ideal", "Elk §6.2, Fig. 17", "Elk-Full's share of Ideal's performance", 94.84,
          "%", "elk_llm.json", _of_ideal, _ELK_DECODE),
    Claim("static_overlap_gain", "Elk §6.2, Fig. 18a", "Static's overlapped preload/execute time "
          "over Basic's", 11.26, "x", "elk_llm.json",
          lambda s: ratio_of_sums(s.elk_llm(), "preload_overlap_s", "static", "basic"),
          "Our Basic overlaps nearly every load: {basic_early} of its loads start while the "
          "operator before them still executes, because its execute points hold a median "
          "{basic_sram}% of a core's SRAM (largest {basic_sram_max}%), so the next operator's "
          "preload fits beside almost every execution; the paper's Basic \"always poorly "
          "overlaps\" (§6.2). Basic already overlaps {basic_overlap}% of its time "
          "(`elk_llm.json`). Drawn as the Elk artifact draws Fig. 18a, the ratio does not "
          "approach the paper's: {weighted_overlap}x with its per-interval weighting, "
          "{figure_overlap}x with its figure adjustments too (`elk_overlap.md`); the artifact's "
          "costs leave it at {narrow}-{wide} (`elk_paper_gap.md`)."),
    Claim("full_removes_contention", "Elk §6.2, Fig. 18a", "interconnect contention Elk-Full "
          "removes over Elk-Dyn", 87.65, "%", "elk_llm.json", _removed_contention,
          "Our Elk-Dyn leaves at most {dyn_stall}% of the time to contention, so Elk-Full's "
          "reordering has little to remove, whatever share of it goes. The paper's share is "
          "mostly how its figure is drawn: the Elk artifact's breakdown script "
          "(`overlap_calc.py` with `mod=True`) adds 1.8x the interconnect time of every design "
          "but Elk-Full to that design's interconnect bar, taking it from its overlap; applied "
          "to our rows (`elk_llm.json`), that accounting alone shows Elk-Full removing "
          "{acct_removed}% of Elk-Dyn's. Under the artifact's costs: {narrow}-{wide} "
          "(`elk_paper_gap.md`)."),
    Claim("full_non_overlapped", "Elk §6.2, Fig. 18a", "Elk-Full's non-overlapped preload, share "
          "of the time", 0.037, "%", "elk_llm.json", _non_overlapped,
          "An HBM-bound decode leaves loads exposed: OPT-30B alone has {exposed_opt}% "
          "(`elk_llm.json`); under the artifact's costs ours is {narrow}-{wide} "
          "(`elk_paper_gap.md`)."),
    *(Claim(f"hbm_util_{d}", "Elk §6.3, Fig. 18b", f"HBM bandwidth utilization, {name}", v, "%",
            "elk_llm.json", lambda s, d=d: _design_mean(s, d, "hbm_utilization"), _ELK_DECODE)
      for d, name, v in (("basic", "Basic", 34.7), ("static", "Static", 46.42),
                         ("elk-dyn", "Elk-Dyn", 51.97), ("elk-full", "Elk-Full", 62.40),
                         ("ideal", "Ideal", 64.38))),
    *(Claim(f"noc_util_{d}", "Elk §6.3, Fig. 18c", f"interconnect utilization, {name}", v, "%",
            "elk_llm.json", lambda s, d=d: _design_mean(s, d, "interconnect_utilization"),
            "Defined differently: ours is the time links move bytes; the artifact counts every "
            "operator's whole shift, sync and shuffle time as busy (`elk_paper_gap.md`).")
      for d, name, v in (("basic", "Basic", 57.25), ("static", "Static", 76.33),
                         ("elk-dyn", "Elk-Dyn", 78.28), ("elk-full", "Elk-Full", 89.52))),
    Claim("full_tflops", "Elk §6.3, Fig. 18d", "Elk-Full's achieved TFLOPS", 81.06, "TFLOPS",
          "elk_llm.json", _achieved_tflops,
          "Our decode runs its matmuls at peak (see above); under the artifact's costs ours is "
          "{narrow}-{wide} (`elk_paper_gap.md`). The rest is not explained: the paper "
          "does not give its FLOPs per token."),
    Claim("fig23_over_basic", "Elk §6.4 (3), Fig. 23", "Elk-Full over Basic across core counts "
          "(2.7 GB/s of HBM per core)", 1.71, "x", "dse/results/elk_fig23_cores.jsonl",
          lambda s: _fig23_over(s, "basic"), _ELK_DECODE),
    Claim("fig23_over_static", "Elk §6.4 (3), Fig. 23", "Elk-Full over Static across core counts",
          1.36, "x", "dse/results/elk_fig23_cores.jsonl", lambda s: _fig23_over(s, "static"),
          _ELK_DECODE),
    Claim("hbm_bound_until", "Elk §6.4 (1), Fig. 19", "HBM bandwidth where Llama2-70B stops "
          "being HBM-bound (Elk-Full > 1.1x its HBM floor)", 8.0, "TB/s",
          "dse/results/elk_fig19_21_hbm.jsonl", _hbm_bound_until,
          "Our decode matmuls run at peak, so execution stays below loading to a higher HBM "
          "bandwidth: at 16 TB/s our Ideal is {ideal_over_floor}x its HBM floor, the paper's "
          "1.55x (`elk_llm.json`, `elk_paper_gap.md`)."),
    Claim("noc_saturates", "Elk §6.4 (2), Fig. 22", "aggregate interconnect bandwidth beyond which "
          "Llama2-70B gains < 2% at 8 TB/s of HBM", 40.0, "TB/s",
          "dse/results/elk_fig22_noc.jsonl", _noc_saturates,
          "At 8 TB/s our Llama2-70B is HBM-bound already at the smallest link bandwidth swept "
          "(Elk-Full at {fig22_low}x its HBM floor, `elk_dse.md`), for the decode-matmul "
          "reason above (`elk_paper_gap.md`)."),
    Claim("training_tflops", "Elk §6.4 (4), Fig. 24", "Llama2-13B training forward with 400 GB/s "
          "of HBM: achieved TFLOPS (paper: more than 650)", 650.0, "TFLOPS",
          "dse/results/elk_fig24_training.jsonl", _training_tflops, ""),
    Claim("elk_compile_s", "Elk §5", "compile time of an LLM's end-to-end plan (paper: about 5 "
          "minutes on a 32-core CPU; ours: one core)", 300.0, "s", "elk_llm_compile.json",
          _elk_compile,
          "Ours is faster on one core: exact memoized plan search, and Elk-Full tries "
          "{orders_70b} preload orders on Llama2-70B where the paper prunes to 720 "
          "(`elk_llm_compile.json`)."),
    Claim("ops_llama2_13b", "Elk Table 2", "operators of Llama2-13B decode (N)", 1928.0, "count",
          "elk_llm_compile.json", lambda s: _ops(s, "llama2-13b"),
          "Operator granularity: TVM's graph has {relax_per_layer} operators per layer before "
          "fusion, our device programs {device_per_layer} after it, Elk 48.2 "
          "(`op_granularity.md`)."),
    Claim("ops_llama2_70b", "Elk Table 2", "operators of Llama2-70B decode (N)", 3808.0, "count",
          "elk_llm_compile.json", lambda s: _ops(s, "llama2-70b"),
          "Operator granularity, as for Llama2-13B (`op_granularity.md`)."),
)

#: Results of the papers no script here reproduces, and why.
NOT_RUN: tuple[tuple[str, str, str], ...] = (
    ("T10 §6.2, Fig. 14", "single-operator speed-ups over Roller (up to 10.79x) and the share of "
     "operators T10 speeds up (> 80%)", "per-operator VGM times are not kept in the results rows"),
    ("T10 §6.2, Fig. 15", "compile time (a few hours per model)", "our exact search is not "
     "T10's filtered search: the two times measure different algorithms (ours: "
     "`t10_vs_vgm.md`, `plan_space_sizes.md`)"),
    ("T10 §6.5, Fig. 20", "scaling over 1-4 chips (V-IPU) against Roller", "not run yet"),
    ("T10 §6.6-§6.7, Fig. 21-22", "IPU+T10 against A100+TensorRT (up to 2.44x; LLM layers 3.10x "
     "on average)", "no GPU model yet (issue 43)"),
    ("T10 §6.8", "HBM emulated by a roofline delay, Single Op vs Inter Op", "superseded by the "
     "Elk designs, which schedule HBM loads explicitly"),
    ("Elk §6.2", "preload order edit distance (2.9 on average)", "not recorded in the results "
     "rows"),
)


def _value(claim: Claim, src: Sources) -> float | None:
    try:
        v = claim.ours(src)
    except (KeyError, TypeError, ZeroDivisionError):
        return None
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def compare(src: Sources | None = None) -> list[dict[str, Any]]:
    """One row per claim: the paper's figure, ours, their ratio, the verdict, ours under the Elk
    artifact's costs (Elk decode claims) and the measured cause of a difference."""
    src = src or Sources()
    gap = [_GapSources(src, setting) for setting in ARTIFACT_SETTINGS]
    known = facts(src)
    rows = []
    for c in CLAIMS:
        ours = _value(c, src)
        ratio = ours / c.paper if ours is not None and c.paper else None
        within = ratio is not None and abs(ratio - 1.0) <= TOLERANCE
        artifact = [_value(c, g) for g in gap] if c.source == "elk_llm.json" else [None, None]
        cause = ""
        if not within and ours is not None:
            cause = c.cause.format(**known, narrow=_fmt(artifact[0], c.unit),
                                   wide=_fmt(artifact[1], c.unit))
        rows.append({"key": c.key, "where": c.where, "what": c.what, "unit": c.unit,
                     "paper": c.paper, "ours": ours, "ratio": ratio, "within": within,
                     "artifact_costs": artifact, "source": c.source, "cause": cause})
    return rows


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "not in the results"
    if unit == "x":
        return f"{v:.2f}x"
    if unit == "%":
        return f"{v:.3g}%" if v < 1 else f"{v:.1f}%"
    if unit == "count":
        return f"{v:,.0f}"
    return f"{v:,.3g} {unit}"


def provenance_of(name: str) -> str:
    """The first line of a results markdown file (its command and commit), or of a dse study's
    rows (their version and time)."""
    path = RESULTS / name
    md = path.with_suffix(".md")
    if md.is_file():
        return md.read_text().splitlines()[0]
    if path.suffix == ".jsonl" or name.startswith("dse/"):
        return "rows of `tvm-icca dse` (see `elk_dse.md` for the commands)"
    return ""


def render(rows: list[dict[str, Any]]) -> str:
    lines = [
        "## The papers' headline results beside ours", "",
        "The papers measured a real IPU Mk2 (T10) and an IPU-POD4 emulator with HBM (Elk); "
        "every figure of ours is simulated. *ours / paper* is our figure over the paper's; a "
        f"difference beyond {TOLERANCE:.0%} names its measured cause. *Ours, Elk artifact's "
        "costs* re-runs the Elk decode rows with the public Elk artifact's transfer and decode "
        "matmul costs as chip overrides (`benchmarks/elk_paper_gap.py`; narrow-wide matmul "
        "tile), to show how much of a difference that cost model explains.", "",
        "| where | what | paper | ours | ours / paper | within 25% | ours, Elk artifact's costs "
        "| cause of the difference |",
        "|---|---|---:|---:|---:|:-:|---:|---|",
    ]
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else ""
        ok = "yes" if r["within"] else ("no" if r["ratio"] is not None else "")
        narrow, wide = r["artifact_costs"]
        bracket = (f"{_fmt(narrow, r['unit'])}-{_fmt(wide, r['unit'])}"
                   if narrow is not None and wide is not None else "")
        lines.append(f"| {r['where']} | {r['what']} | {_fmt(r['paper'], r['unit'])} | "
                     f"{_fmt(r['ours'], r['unit'])} | {ratio} | {ok} | {bracket} | {r['cause']} |")
    within = sum(r["within"] for r in rows)
    measured = sum(r["ours"] is not None for r in rows)
    lines += ["", f"{within} of {measured} measured figures within {TOLERANCE:.0%} of the paper's.",
              "", "## Not reproduced here", "", "| where | what | why |", "|---|---|---|"]
    lines += [f"| {w} | {what} | {why} |" for w, what, why in NOT_RUN]
    lines += ["", "## Where our figures come from", ""]
    for name in sorted({r["source"] for r in rows}):
        lines.append(f"- `{name}`: {provenance_of(name)}")
    return "\n".join(lines) + "\n"


def main() -> None:
    rows = compare()
    text = render(rows)
    print(text)
    write_markdown(RESULTS / "paper_results.md", text)
    write_json(RESULTS / "paper_results.json", {"rows": rows})


if __name__ == "__main__":
    main()


__all__ = ["CLAIMS", "Claim", "NOT_RUN", "Sources", "compare", "render"]
