"""Per-operator breakdown of one layer: where a prefill, training-forward or decode layer's
time goes, operator by operator, beside what no plan can avoid.

One layer of the model is compiled with one preload design and timed by the timing
simulator; its operators are grouped by their displayed label with the split rewrite's
``(part k/n)`` removed (the pieces of one operator count as that operator). Each group shows
its time and share of the layer, its FLOPS utilization (its FLOPs over the chip's peak for
the time it holds the cores), how its time splits into compute and transfers (re-layouts of
its inputs, rotation shifts, replica reductions), and its ratio to its lower bound
(:func:`runtime_sim.timing.report_builder.lower_bounds`) and to its execution bound (its FLOPs at
peak, then for a weight product the least activation and partial-sum bytes a core holding a
weight block receives, :func:`runtime_sim.timing.floors.execute_bound_seconds`: what its
execution takes under a plan keeping one copy of the weight). Under the table: the run's
floors, the sum of the execution bounds (executions run one after another) and the report's
``remainder``, the parts of the time above the largest floor.

Used by ``long_context.py --profile`` and ``elk_llm.py --profile``.
"""

from __future__ import annotations

import json
import pathlib
import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from model_flops import written_flops  # benchmarks/, beside this script
from result_files import write_json, write_markdown
from runtime_sim.contract.expr import TensorExpr
from runtime_sim.timing.floors import execute_bound_seconds
from runtime_sim.timing.timing_report import OpTiming, TimingReport
from tvm_icca.drivers.device_programs import compile_programs
from tvm_icca.hardware_choice import resolve_hardware

#: The split rewrite's label suffix of one piece (``matmul_(part_3/16)``).
_PART = re.compile(r"_\(part_\d+/\d+\)")


@dataclass
class OpGroup:
    """The operators of one layer that share a label (the pieces of one split operator)."""

    label: str
    kind: str
    count: int = 0
    time_s: float = 0.0  # what it costs the compute array: its execution and the wait for its loads
    wait_s: float = 0.0
    compute_s: float = 0.0
    relayout_s: float = 0.0
    shift_s: float = 0.0
    reduction_s: float = 0.0
    other_transfer_s: float = 0.0  # transfers the three above do not name (e.g. distribution)
    lower_bound_s: float = 0.0
    exec_bound_s: float = 0.0  # execute_bound_seconds of its operators (0 when not known)
    flops: int = 0
    cores: set[int] = field(default_factory=set)

    def add(self, op: OpTiming, exec_bound_s: float = 0.0) -> None:
        self.count += 1
        self.exec_bound_s += exec_bound_s
        self.time_s += op.wait_s + op.duration_s
        self.wait_s += op.wait_s
        self.compute_s += op.compute_s
        self.relayout_s += op.relayout_s
        self.shift_s += op.shift_s
        self.reduction_s += op.reduction_s
        self.other_transfer_s += max(0.0, op.duration_s - op.compute_s - op.relayout_s
                                     - op.shift_s - op.reduction_s)
        self.lower_bound_s += op.lower_bound_s
        self.flops += op.flops
        self.cores.add(op.cores)


def group_ops(report: TimingReport,
              exprs: dict[tuple[str, str], TensorExpr] | None = None) -> list[OpGroup]:
    """The report's operators grouped by label without the split suffix, in program order;
    ``exprs`` (``(region, operator name)`` -> expression) gives their execution bounds."""
    groups: OrderedDict[str, OpGroup] = OrderedDict()
    for op in report.per_op:
        label = _PART.sub("", op.display)
        expr = (exprs or {}).get((op.region, op.name))
        bound = execute_bound_seconds(expr, op.flops, report.hw) if expr is not None else 0.0
        groups.setdefault(label, OpGroup(label, op.kind)).add(op, bound)
    return list(groups.values())


def peak_flops(report: TimingReport) -> float:
    """The chip's peak FLOP/s for this run's operators, as the compute floor defines it
    (:func:`runtime_sim.timing.floors.resource_floors`: FLOPs over peak)."""
    return report.flops / report.compute_floor_s if report.compute_floor_s > 0 else 0.0


def profile_table(report: TimingReport, title: str, written: int | None = None,
                  exprs: dict[tuple[str, str], TensorExpr] | None = None) -> list[str]:
    """Markdown lines: the per-group table of one layer, then its floors and remainder;
    ``written``: the model's FLOPs as written (:mod:`model_flops`), for its MFU; ``exprs``:
    the operators' expressions (:func:`group_ops`), for their execution bounds."""
    peak = peak_flops(report)
    total = report.total_s
    model = (f" Written {written / 1e12:.2f} TFLOP (every score): MFU "
             f"{written / (total * peak):.1%}." if written and peak and total else "")
    lines = [f"## {title}", "",
             f"{total * 1e3:.3f} ms; {report.flops / 1e12:.2f} TFLOP executed; FLOPS utilization "
             f"{report.flops_utilization:.1%}; bound by {report.run_bound_by} "
             f"(floor {report.floor_s * 1e3:.3f} ms).{model}", "",
             "| operator | kind | ops | cores | ms | share | FLOPS util | load wait ms | "
             "compute ms | re-layout ms | shift ms | reduction ms | other ms | x lower bound | "
             "x exec bound |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    groups = group_ops(report, exprs)
    for g in sorted(groups, key=lambda g: -g.time_s):
        util = g.flops / (peak * g.time_s) if peak and g.time_s else 0.0
        cores = (f"{min(g.cores)}" if len(g.cores) == 1 else f"{min(g.cores)}-{max(g.cores)}")
        ratio = g.time_s / g.lower_bound_s if g.lower_bound_s > 0 else float("nan")
        exec_ratio = g.time_s / g.exec_bound_s if g.exec_bound_s > 0 else float("nan")
        lines.append(
            f"| {g.label} | {g.kind} | {g.count} | {cores} | {g.time_s * 1e3:.3f} | "
            f"{g.time_s / total:.1%} | {util:.1%} | {g.wait_s * 1e3:.3f} | {g.compute_s * 1e3:.3f} | "
            f"{g.relayout_s * 1e3:.3f} | {g.shift_s * 1e3:.3f} | {g.reduction_s * 1e3:.3f} | "
            f"{g.other_transfer_s * 1e3:.3f} | {ratio:.2f} | {exec_ratio:.2f} |")
    floors = _floors(report)
    lines += ["", "Floors (ms): " + ", ".join(f"{k} {v * 1e3:.3f}" for k, v in floors.items()) + "."]
    if exprs:
        lines += [f"Executions (ms): {sum(o.duration_s for o in report.per_op) * 1e3:.3f}, "
                  f"their execution bounds {sum(g.exec_bound_s for g in groups) * 1e3:.3f}."]
    if report.remainder:
        lines += ["Time above the largest floor (ms): " + ", ".join(
            f"{k} {v * 1e3:.3f}" for k, v in report.remainder.items() if v > 0) + "."]
    return lines + [""]


def profile_record(report: TimingReport,
                   exprs: dict[tuple[str, str], TensorExpr] | None = None) -> dict[str, Any]:
    """The groups and floors as JSON-ready data (the results file's rows)."""
    return {"total_ms": report.total_s * 1e3, "flops_utilization": report.flops_utilization,
            "run_bound_by": report.run_bound_by,
            "floors_ms": {k: v * 1e3 for k, v in _floors(report).items()},
            "remainder_ms": {k: v * 1e3 for k, v in (report.remainder or {}).items()},
            "groups": [{**{k: v for k, v in vars(g).items() if k != "cores"},
                        "cores": sorted(g.cores)} for g in group_ops(report, exprs)]}


def _floors(report: TimingReport) -> dict[str, float]:
    names = ("compute_floor_s", "compute_units_floor_s", "hbm_floor_s", "host_floor_s",
             "interconnect_floor_s", "inter_chip_floor_s")
    return {n.removesuffix("_floor_s").replace("_", " "): getattr(report, n) for n in names
            if getattr(report, n, 0.0)}


@dataclass(frozen=True)
class ProfileCase:
    """One layer to profile: a zoo model, its phase and length, the chip and the design."""

    model: str
    hardware: str
    batch: int
    phase: str  # "decode", "prefill" or "train"
    length: int  # the KV context of a decode step, else the tokens of each sequence
    design: str = "elk-full"

    @property
    def title(self) -> str:
        size = "context" if self.phase == "decode" else "tokens"
        return (f"{self.model} {self.phase}, batch {self.batch}, {self.length} {size}, "
                f"one layer, {self.hardware}, {self.design}")


def profile_case(case: ProfileCase) -> tuple[TimingReport, float, int | None,
                                             dict[tuple[str, str], TensorExpr]]:
    """Compile one layer of ``case`` and time it: the report, the compile seconds, for a
    prefill or training layer its FLOPs as written (:func:`model_flops.written_flops`), and
    the operators' expressions by ``(region, name)`` (:func:`group_ops`)."""
    from elk_llm import case_workload  # benchmarks/, beside this script

    args = {} if case.phase == "decode" else {"phase": case.phase, "seq_len": case.length}
    workload = case_workload(case.model, case.batch, case.length, 1, args)
    start = time.perf_counter()
    compiled = compile_programs(workload, resolve_hardware(case.hardware), preload=case.design)
    compile_s = time.perf_counter() - start
    written = written_flops(workload.config) if case.phase != "decode" else None
    exprs = {(p.region, op.name): op.expr for p in compiled.programs for op in p.ops}
    return compiled.simulate(), compile_s, written, exprs


def write_profiles(cases: list[ProfileCase], out: pathlib.Path, heading: str) -> None:
    """Profile every case and write ``out`` (``.md`` and ``.json``)."""
    lines, rows = [f"# {heading}", "",
                   "One layer per case (with the model's embedding and head); operators grouped "
                   "by label, the pieces of a split operator together, slowest first. ms: what "
                   "the group costs the compute array, its execution and the wait for its loads "
                   "(the operators' times add up to the run's). FLOPS util: the group's FLOPs "
                   "over the chip's peak for that time. x lower bound: that time over what no "
                   "plan can avoid (its FLOPs at peak, its distinct HBM bytes at the full HBM "
                   "bandwidth, its host bytes, one step's sync; an operator whose inputs Elk "
                   "preloaded during earlier operators can be below 1).", ""], []
    for case in cases:
        report, compile_s, written, exprs = profile_case(case)
        lines += profile_table(report, case.title, written, exprs)
        rows.append({**vars(case), "compile_s": compile_s, "written_flops": written,
                     **profile_record(report, exprs)})
        print(f"  profiled {case.title}: {report.total_s * 1e3:.3f} ms", flush=True)
    write_markdown(out.with_suffix(".md"), "\n".join(lines))
    write_json(out.with_suffix(".json"), json.loads(json.dumps(rows)))
