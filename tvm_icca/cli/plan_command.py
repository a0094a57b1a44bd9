"""``tvm-icca plan``: the execution plan of one operator, as JSON (T10 §4.2-§4.3.1).

``tvm-icca plan matmul --m 32 --k 5120 --n 15360 --cost-model t10-bench`` answers the T10
benchmark problem (:mod:`tvm_icca.plan_search.t10_bench`); ``--cost-model analytic`` (default)
plans with the compiler's own model (:func:`tvm_icca.plan_search.plan_operator`). It prints the
chosen plan and, with ``--pareto``, a table of the time/memory Pareto plans, fastest first.
``--json`` prints the same as JSON: matmul plans give ``F_op`` as ``[m, k, n]`` (the analytic
answer names them first, ``axes``) and the six temporal factors ``f_t_<tensor>_<axis>``, plus
``time_s`` and ``cores``; ``--pareto`` adds the Pareto plans under ``pareto``.
``tvm-icca plan conv2d`` prints ``axes``, ``F_op`` in that order and the temporal factors of
the rotatable (tensor, axis) pairs.

``tvm-icca plan model --model bert-large --batch 4 --hw ipu-mk2`` keeps a zoo model on the chip
and prints what T10 Algorithm 1 decided for every operator (:mod:`tvm_icca.plan_search.reconcile`):
its idle and active footprint, estimated execution and setup time, and whether it idles in its
active plan; ``--json`` prints the same as JSON, ``--simulate`` adds the simulated timing.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from runtime_sim.contract.units import format_bytes, format_seconds, in_unit, time_unit
from tvm_icca.cli.args import (
    add_hardware_argument,
    add_progress_argument,
    nonneg_int,
    positive_int,
    unit_float,
)

COST_MODELS = ("analytic", "t10-bench")


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("plan", help="search the execution plan of one operator")
    ops = parser.add_subparsers(dest="op", metavar="OP")

    mm = ops.add_parser("matmul", help="C[m,n] += A[m,k] * B[k,n]")
    for axis, what in (("m", "rows of A and C"), ("k", "the reduced axis: columns of A, rows "
                                                     "of B"), ("n", "columns of B and C")):
        mm.add_argument(f"--{axis}", type=positive_int, required=True, help=what)
    _common(mm)
    mm.set_defaults(func=_run_matmul)

    conv = ops.add_parser("conv2d", help="NCHW convolution O[b,o,y,x] += I[b,c,..] * W[o,c,kh,kw]")
    for name, default, what in (
            ("batch", 1, "images b"), ("channels", None, "input channels c"),
            ("height", None, "input height"), ("width", None, "input width"),
            ("filters", None, "output channels o"), ("kernel", 3, "kernel height and width"),
            ("stride", 1, "stride of both spatial axes"), ("pad", 0, "zero padding on each side"),
            ("dilation", 1, "dilation of the kernel")):
        conv.add_argument(f"--{name}", type=nonneg_int if name == "pad" else positive_int,
                          required=default is None, default=default,
                          help=what if default is None else f"{what} (default {default})")
    _common(conv, cost_models=("analytic",))
    conv.set_defaults(func=_run_conv2d)
    model = ops.add_parser("model", help="idle/active plans of every operator of a zoo model "
                           "kept on chip (T10 Algorithm 1)")
    model.add_argument("--model", required=True, help="workload name, e.g. bert-large")
    model.add_argument("--batch", type=positive_int, default=None,
                       help="batch size (default: the model's)")
    model.add_argument("--seq-len", "--context", dest="context", type=positive_int, default=None,
                       help="sequence length (BERT) or KV-cache context (LLMs)")
    model.add_argument("--layers", type=positive_int, default=None,
                       help="keep only the first N layers")
    model.add_argument("--tiny", action="store_true", help="the model's small test config")
    add_hardware_argument(model, "chip to plan for")
    model.add_argument("--simulate", action="store_true", help="also time the programs")
    model.add_argument("--json", action="store_true", help="print JSON instead of the table")
    add_progress_argument(model)
    model.set_defaults(func=_run_model)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])
    return parser


def _run_model(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    from runtime_sim.contract.errors import IccaError
    from tvm_icca.cli.simulate_command import workload_kwargs
    from tvm_icca.drivers.device_programs import compile_programs
    from tvm_icca.workloads import canonical_name, get_workload

    try:
        name = canonical_name(args.model)
        workload = get_workload(name, **workload_kwargs(name, args.batch, args.context,
                                                        args.layers, None, args.tiny))
        compiled = compile_programs(workload, args.hw, state="chip", progress=args.progress)
        report = compiled.simulate(progress=args.progress) if args.simulate else None
    except (IccaError, KeyError) as err:
        print(f"tvm-icca: error: {err}", file=sys.stderr)
        return 1
    plan = compiled.model_plan
    payload: dict[str, Any] = {
        "model": compiled.name, "hardware": compiled.hw.name, "compile_s": compiled.compile_s,
        "capacity_bytes_per_core": plan.capacity_bytes,
        "idle_bytes_per_core": plan.reconciliation.idle_bytes,
        "estimated_time_s": plan.estimated_time_s,
        "search_steps": len(plan.reconciliation.trace),
        "operators": [d.to_dict() for d in plan.decisions],
    }
    if report is not None:
        payload["simulated"] = {"total_s": report.total_s, "compute_s": report.compute_s,
                                "transfer_s": report.transfer_s,
                                "peak_sram_bytes_per_core": report.peak_sram_bytes_per_core}
    if args.json:
        print(json.dumps(payload, indent=1))
        return 0
    print(f"{compiled.name} on {compiled.hw.name}: {len(plan.decisions)} operators "
          f"({sum(d.calls for d in plan.decisions)} calls), compiled in {compiled.compile_s:.1f} s")
    print(f"idle memory {format_bytes(plan.reconciliation.idle_bytes)} of "
          f"{format_bytes(plan.capacity_bytes)} per core, "
          f"estimated {format_seconds(plan.estimated_time_s)} after {payload['search_steps']} "
          f"Algorithm 1 steps")
    # region names are long fused-op names: number them in call order (``--json`` has them)
    regions = list(dict.fromkeys(d.name.rsplit(".", 1)[0] for d in plan.decisions))
    # one time unit for the table, the one its largest time reads best in
    unit = time_unit(max((t for d in plan.decisions for t in (d.time_s, d.setup_s)), default=0.0))
    print(f"{'operator':<10} {'kind':<12} {'calls':>5} {'options':>7} {'idle B':>8} "
          f"{'active B':>8} {'exec ' + unit[0]:>8} {'setup ' + unit[0]:>8}  in place")
    for d in plan.decisions:
        region, op = d.name.rsplit(".", 1)
        short = f"R{regions.index(region)}.{op}"
        print(f"{short:<10} {d.kind:<12} {d.calls:>5} {d.options:>7} {d.idle_bytes:>8} "
              f"{d.active_bytes:>8} {in_unit(d.time_s, unit, 8, 2)} "
              f"{in_unit(d.setup_s, unit, 8, 2)}  {'yes' if d.in_place else 'no'}")
    if report is not None:
        print(f"simulated: {format_seconds(report.total_s)}, transfer "
              f"{100 * report.transfer_s / report.total_s:.0f}%, peak SRAM "
              f"{format_bytes(report.peak_sram_bytes_per_core)} per core")
    return 0


def _common(parser: argparse.ArgumentParser, cost_models: tuple[str, ...] = COST_MODELS) -> None:
    parser.add_argument("--dtype", default="float16", choices=("float16", "float32"),
                        help="element type of every tensor (default float16)")
    add_hardware_argument(parser, "chip to plan for")
    bench = ("; t10-bench: the T10 benchmark problem, modelled exactly"
             if "t10-bench" in cost_models else "")
    parser.add_argument("--cost-model", default="analytic", choices=cost_models,
                        help=f"analytic (default): the compiler's own cost model{bench}")
    parser.add_argument("--budget", type=positive_int, default=None,
                        help="bytes per core for the operator (default: SRAM minus shift buffer)")
    parser.add_argument("--pareto", action="store_true",
                        help="also print the time/memory Pareto plans (T10 §4.3.1)")
    parser.add_argument("--min-utilization", type=unit_float, default=0.9,
                        help="parallelism constraint of the Pareto search (default 0.9)")
    parser.add_argument("--padding", type=unit_float, default=0.9,
                        help="padding constraint: least real/padded ratio (default 0.9)")
    parser.add_argument("--json", action="store_true",
                        help="print JSON (seconds and bytes as plain numbers) instead of the table")
    parser.add_argument("--indent", type=nonneg_int, default=None,
                        help="indent the JSON output (with --json)")
    add_progress_argument(parser)


def _filters(args: argparse.Namespace):
    from tvm_icca.plan_search.filters import PlanFilters

    return PlanFilters.t10(args.min_utilization, args.padding)


def _emit(payload: dict[str, Any], args: argparse.Namespace) -> int:
    if args.json:
        json.dump(payload, sys.stdout, indent=args.indent)
        sys.stdout.write("\n")
    else:
        print("\n".join(plan_table(payload, _title(args))))
    return 0


def _title(args: argparse.Namespace) -> str:
    if args.op == "matmul":
        shape = f"m={args.m} k={args.k} n={args.n}"
    else:
        shape = (f"batch={args.batch} channels={args.channels} {args.height}x{args.width} "
                 f"filters={args.filters} kernel={args.kernel} stride={args.stride} "
                 f"pad={args.pad} dilation={args.dilation}")
    return f"{args.op} {shape} ({args.dtype}) on {args.hw.name}, {args.cost_model} cost model"


def _temporal(plan: dict[str, Any]) -> str:
    """The temporal factors over 1 (``A_k=4 C_m=2``; ``-`` when nothing rotates)."""
    factors = [f"{key[len('f_t_'):]}={value}" for key, value in plan.items()
               if key.startswith("f_t_") and value != 1]
    return " ".join(factors) or "-"


def plan_table(payload: dict[str, Any], title: str) -> list[str]:
    """``tvm-icca plan matmul|conv2d`` as a person reads it: the chosen plan, then the
    Pareto plans (``--pareto``) one per row, fastest first, times and bytes in adaptive units
    (:mod:`runtime_sim.contract.units`); ``--json`` prints ``payload`` itself."""
    axes = payload.get("axes") or ["m", "k", "n"]
    f_op = f"F_op [{', '.join(axes)}]"
    lines = [title,
             f"chosen plan: {f_op} = {payload['F_op']} on {payload['cores']} cores, "
             f"estimated {format_seconds(payload['time_s'])}",
             f"  temporal factors (tensor_axis=f_t, those over 1): {_temporal(payload)}"]
    if payload.get("loop_order"):
        lines.append(f"  loop order: {' '.join(payload['loop_order'])}")
    pareto = payload.get("pareto")
    if pareto is None:
        return lines
    rows = sorted(pareto, key=lambda p: (p["time_s"], p["memory_bytes"]))
    lines += ["", f"{len(rows)} Pareto plans (time vs memory per core, T10 §4.3.1), fastest first:",
              f"  {'time':>10}  {'memory/core':>11}  {'cores':>5}  {f_op:<{max(16, len(f_op))}}  "
              "temporal factors (over 1)"]
    for p in rows:
        lines.append(f"  {format_seconds(p['time_s']):>10}  {format_bytes(p['memory_bytes']):>11}  "
                     f"{p['cores']:>5}  {str(p['F_op']):<{max(16, len(f_op))}}  {_temporal(p)}")
    return lines


def _matmul_keys(plan, time_s: float, cores: int) -> dict[str, Any]:
    return {
        "F_op": [plan.F("m"), plan.F("k"), plan.F("n")],
        "f_t_A_m": plan.ft(0, "m"), "f_t_A_k": plan.ft(0, "k"),
        "f_t_B_k": plan.ft(1, "k"), "f_t_B_n": plan.ft(1, "n"),
        "f_t_C_m": plan.ft(2, "m"), "f_t_C_n": plan.ft(2, "n"),
        "time_s": time_s, "cores": cores,
    }


def _run_matmul(args: argparse.Namespace) -> int:
    hw = args.hw  # resolved by --hw (tvm_icca.cli.args.hardware_arg)
    if args.cost_model == "t10-bench":
        from tvm_icca.plan_search.t10_bench import T10BenchSpec, bench_pareto, solve

        spec = T10BenchSpec.from_hardware(hw, args.dtype)
        if args.budget is not None:
            spec = T10BenchSpec(**{**spec.__dict__, "sram_bytes": args.budget + spec.shift_buffer_bytes})
        answer = solve(args.m, args.k, args.n, spec)
        payload = answer.to_json_dict()
        if args.pareto:
            payload["pareto"] = [dict(p.to_json_dict(), memory_bytes=p.memory_bytes)
                                 for p in bench_pareto(args.m, args.k, args.n, spec, _filters(args))]
        return _emit(payload, args)

    from tvm_icca.plan_search import plan_operator
    from tvm_icca.plan_search.pareto import pareto_plans
    from tvm_icca.plan_search.t10_bench import bench_expr

    expr = bench_expr(args.m, args.k, args.n, args.dtype)
    planned = plan_operator(expr, hw, budget_bytes=args.budget, name="matmul")
    # axes named first, as for every other operator; the t10-bench answer above keeps the
    # benchmark's own format (F_op is [m, k, n] there by definition)
    payload = {"axes": ["m", "k", "n"],
               **_matmul_keys(planned.plan, planned.time_s, planned.layout.num_cores)}
    if args.pareto:
        payload["pareto"] = [
            dict(_matmul_keys(p.plan, p.time_s, p.cores), memory_bytes=p.memory_bytes)
            for p in pareto_plans(expr, hw, filters=_filters(args), budget_bytes=args.budget)
        ]
    return _emit(payload, args)


def _generic_keys(expr, plan, time_s: float, cores: int) -> dict[str, Any]:
    from tvm_icca.plan_search.search_memo import plan_structure

    structure = plan_structure(expr)
    out: dict[str, Any] = {"axes": list(structure.axes), "F_op": [plan.F(a) for a in structure.axes]}
    for t, access in enumerate(expr.tensors):
        for a, axis in enumerate(structure.axes):
            if structure.rotatable[t, a]:
                out[f"f_t_{access.name}_{axis}"] = plan.ft(t, axis)
    out["loop_order"] = list(plan.loop_order)
    out["time_s"] = time_s
    out["cores"] = cores
    return out


def _run_conv2d(args: argparse.Namespace) -> int:
    from tvm_icca.plan_search import plan_operator
    from tvm_icca.plan_search.pareto import pareto_plans

    hw = args.hw  # resolved by --hw (tvm_icca.cli.args.hardware_arg)
    expr = conv2d_expr(args.batch, args.channels, args.height, args.width, args.filters,
                       args.kernel, args.stride, args.pad, args.dilation, args.dtype)
    planned = plan_operator(expr, hw, budget_bytes=args.budget, name="conv2d")
    payload = _generic_keys(expr, planned.plan, planned.time_s, planned.layout.num_cores)
    if args.pareto:
        payload["pareto"] = [
            dict(_generic_keys(expr, p.plan, p.time_s, p.cores), memory_bytes=p.memory_bytes)
            for p in pareto_plans(expr, hw, filters=_filters(args), budget_bytes=args.budget)
        ]
    return _emit(payload, args)


def conv2d_expr(B: int, C: int, H: int, W: int, O: int, K: int, stride: int = 1, pad: int = 0,
                dilation: int = 1, dtype: str = "float16"):
    """NCHW conv as a tensor expression with compound input indices (T10 §5, Eq. 2)."""
    from runtime_sim.contract.expr import AffineIndex, Axis, TensorAccess, TensorExpr, make_load

    def out_size(n: int) -> int:
        return (n + 2 * pad - dilation * (K - 1) - 1) // stride + 1

    ax = AffineIndex.of_axis
    h = AffineIndex((("y", stride), ("kh", dilation)), -pad)
    w = AffineIndex((("x", stride), ("kw", dilation)), -pad)
    inp = TensorAccess("I", (B, C, H, W), dtype, (ax("b"), ax("c"), h, w))
    wt = TensorAccess("W", (O, C, K, K), dtype, (ax("o"), ax("c"), ax("kh"), ax("kw")))
    out = TensorAccess("O", (B, O, out_size(H), out_size(W)), dtype, (ax("b"), ax("o"), ax("y"), ax("x")))
    axes = (Axis("b", B), Axis("o", O), Axis("y", out_size(H)), Axis("x", out_size(W)),
            Axis("c", C, True), Axis("kh", K, True), Axis("kw", K, True))
    body = {"op": "mul", "args": [make_load(0, inp.indices), make_load(1, wt.indices)]}
    return TensorExpr("conv2d", axes, (inp, wt), out, body)
