"""``tvm-icca simulate``: time a model of the zoo on a simulated chip, without building it.

Example (Elk §6.1's setting)::

    tvm-icca simulate --model llama2-13b --batch 32 --context 2048 --hw ipu-pod4-hbm
    tvm-icca simulate --model llama2-70b --batch 32 --layers 2 --json
    tvm-icca simulate --model resnet50 --hw ipu-mk2 --trace resnet50.json

The model is partitioned and its regions compiled to device programs
(:func:`tvm_icca.simulate.compile_programs`), then timed by
:func:`runtime_sim.timing.simulate_timing`. Progress bars go to stderr, so ``--json`` output
on stdout stays one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

#: Keys ``--json`` always has at the top level.
SUMMARY_KEYS = ("total_s", "compute_s", "transfer_s", "hbm_s", "overlap_s", "stall_s", "num_ops",
                "hbm_bytes")


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "simulate", help="time a zoo model on a simulated chip (no LLVM build)",
        description="Partition a model of the workload zoo, compile its ICCA regions to device "
        "programs and time them on the simulated chip (see `tvm-icca models`).",
    )
    parser.add_argument("--model", required=True, help="workload name, e.g. llama2-13b")
    parser.add_argument("--batch", type=int, default=None,
                        help="batch size (default: the model's, 1 for most, 4096 points for NeRF)")
    parser.add_argument("--context", "--seq-len", dest="context", type=int, default=None,
                        help="KV-cache context of LLM decoding (default 2048) or sequence "
                        "length of BERT (default 128); ignored by other models")
    parser.add_argument("--hw", default="ipu-pod4-hbm", help="hardware preset (default ipu-pod4-hbm)")
    parser.add_argument("--layers", type=int, default=None, help="keep only the first N layers")
    parser.add_argument("--dtype", default=None, help="float16 (default) or float32")
    parser.add_argument("--tiny", action="store_true",
                        help="the model's small test config (same architecture, few channels)")
    parser.add_argument("--trace", metavar="PATH", help="write a Chrome trace (chrome://tracing, Perfetto)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--max-ops", type=int, default=20, help="slowest operators listed (default 20)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.set_defaults(func=_run)
    return parser


def workload_kwargs(name: str, batch: int | None, context: int | None, layers: int | None,
                    dtype: str | None, tiny: bool = False) -> dict[str, Any]:
    """Keyword arguments of :func:`tvm_icca.workloads.get_workload` for a command line
    (``None`` leaves the model's default)."""
    from ..workloads import workload_info  # pylint: disable=import-outside-toplevel

    kwargs: dict[str, Any] = {"tiny": tiny}
    if batch is not None:
        kwargs["batch"] = batch
    seq_arg = workload_info(name)["sequence_arg"]
    if seq_arg is not None and context is not None:
        kwargs[seq_arg] = context
    if layers is not None:
        kwargs["num_layers"] = layers
    if dtype is not None:
        kwargs["dtype"] = dtype
    return kwargs


def _run(args: argparse.Namespace) -> int:
    from ..hardware import resolve_hardware  # pylint: disable=import-outside-toplevel
    from ..simulate import compile_programs  # pylint: disable=import-outside-toplevel
    from ..workloads import canonical_name, get_workload  # pylint: disable=import-outside-toplevel

    try:
        name = canonical_name(args.model)
    except KeyError as err:
        print(f"tvm-icca: error: {err.args[0]}", file=sys.stderr)
        return 2
    hw = resolve_hardware(args.hw)
    progress = not args.no_progress
    workload = get_workload(name, **workload_kwargs(name, args.batch, args.context, args.layers,
                                                         args.dtype, args.tiny))
    model = compile_programs(workload, hw, progress=progress)
    start = time.perf_counter()
    report = model.simulate(trace=bool(args.trace), progress=progress)
    simulate_s = time.perf_counter() - start
    if args.trace:
        report.write_trace(args.trace)

    if args.json:
        data = report.to_dict(per_op=False)
        data.update(model=name, config=dict(workload.config), compile=model.summary(),
                    compile_s=model.compile_s, simulate_s=simulate_s)
        missing = [k for k in SUMMARY_KEYS if k not in data]
        if missing:  # the contract of --json: never silently drop a summary key
            raise KeyError(f"timing report lacks {missing}")
        print(json.dumps(data, default=_json_default))
        return 0

    summary = model.summary()
    print(f"{workload.description} on {hw.name}")
    print(f"  {summary['regions']} region calls ({summary['distinct_regions']} distinct), "
          f"{summary['device_ops']} device ops; Relax ops: {summary['offloaded_relax_ops']} "
          f"offloaded, {summary['host_relax_ops']} on the host")
    inputs = summary["input_bytes"]
    print(f"  program inputs: hbm {inputs['hbm'] / 1e6:.1f} MB, host {inputs['host'] / 1e6:.1f} MB, "
          f"chip {inputs['chip'] / 1e6:.1f} MB")
    print(f"  compile {model.compile_s:.2f} s (plan cache {summary['plan_cache']}), "
          f"simulate {simulate_s:.2f} s")
    print(report.table(max_ops=args.max_ops))
    if args.trace:
        print(f"trace written to {args.trace}")
    return 0


def _json_default(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return str(value)
