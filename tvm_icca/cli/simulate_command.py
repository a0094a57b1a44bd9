"""``tvm-icca simulate``: time a model on a simulated chip, without building it.

The model is a workload of the zoo (``tvm-icca models``) or an ONNX file. Examples (Elk
§6.1's setting, then a user's model)::

    tvm-icca simulate llama2-13b --batch 32 --context 2048 --hw ipu-pod4-hbm
    tvm-icca simulate llama2-13b --phase prefill --seq-len 2048 --layers 1 --hw ipu-pod4-hbm
    tvm-icca simulate --model llama2-70b --batch 32 --layers 2 --json
    tvm-icca simulate resnet50 --hw ipu-mk2 --trace resnet50.json
    tvm-icca simulate model.onnx --shape input=1,3,224,224 --hw ipu-mk2
    tvm-icca simulate llama2-7b --layers 2 --batch 1 --hw a100

A GPU preset (``a100``, ``h100``, ``b200``) gives the GPU reference instead: the model is
compiled for an ICCA chip (``--partition-hw``, default ipu-mk2: the GPU reads only the
operators' semantics, not the plans) and its operators priced by the roofline of
:mod:`runtime_sim.gpu`, the estimate printed beside the roofline bound. An estimate, never a
measurement.

The model is partitioned and its regions compiled to device programs
(:func:`tvm_icca.drivers.device_programs.compile_programs`, the timing-only path: no LLVM build), then timed
by :func:`runtime_sim.timing.simulate_timing`. Progress bars go to stderr, so ``--json``
output on stdout stays one JSON object. Every argument is checked before any work.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
import time
from typing import Any

from runtime_sim.contract.gpu import GpuSpec
from runtime_sim.contract.presets import DEFAULT_PRESET
from runtime_sim.contract.units import format_bytes, format_seconds
from tvm_icca.cli.args import (
    UsageError,
    add_hardware_argument,
    add_model_arguments,
    add_progress_argument,
    add_layer_reuse_argument,
    add_state_argument,
    hardware_arg,
    nonneg_int,
    shape_dict,
    tuning_records,
    writable_path,
)
from tvm_icca.model_pass.planner import PRELOAD_CHOICES
from tvm_icca.model_pass.state_place import describe_setting

#: Keys ``--json`` always has at the top level.
SUMMARY_KEYS = ("total_s", "compute_s", "transfer_s", "hbm_s", "overlap_s", "stall_s", "num_ops",
                "hbm_bytes", "hbm_delivered_bytes", "slow_kinds", "design", "compile_s",
                "energy_j", "energy_breakdown_j", "average_power_w", "board_power_w")


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "simulate", help="time a zoo model or an ONNX file on a simulated chip (no LLVM build)",
        description="Partition a model (a workload of the zoo, see `tvm-icca models`, or an "
        "ONNX file), compile its ICCA regions to device programs and time them on the "
        "simulated chip.",
    )
    add_model_arguments(parser, "llama2-13b")
    add_hardware_argument(parser, "chip to simulate", gpus=True)
    parser.add_argument("--partition-hw", type=hardware_arg, default=DEFAULT_PRESET,
                        metavar="PRESET|FILE",
                        help="with a GPU --hw: the ICCA chip whose compiler partitions the "
                        f"model into the operators the GPU is priced on (default {DEFAULT_PRESET})")
    add_state_argument(parser)
    add_layer_reuse_argument(parser)
    parser.add_argument("--design", default=None, choices=PRELOAD_CHOICES,
                        help="HBM preload design (Elk §6.1): basic, static, elk-dyn, elk-full "
                        "(default on a chip with HBM), ideal (the roofline), or off")
    parser.add_argument("--database", metavar="DIR", type=tuning_records, default=None,
                        help="tuning records (the --work-dir of `tvm-icca tune`): compile with "
                        "the best measured plan of every operator that has one")
    parser.add_argument("--trace", metavar="PATH", type=writable_path,
                        help="write a Chrome trace (chrome://tracing, Perfetto)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--max-ops", type=nonneg_int, default=20,
                        help="slowest operators listed (default 20)")
    add_progress_argument(parser)
    parser.set_defaults(func=_run)
    return parser


def workload_kwargs(name: str, batch: int | None, context: int | None, layers: int | None,
                    dtype: str | None, tiny: bool = False, phase: str | None = None
                    ) -> dict[str, Any]:
    """Keyword arguments of :func:`tvm_icca.workloads.get_workload` for a command line
    (``None`` leaves the model's default). ``context`` is the one length of the command
    line (``--context``/``--seq-len``): an LLM decode step's KV cache, a prefill's or
    training forward's tokens per sequence (``phase``), BERT's sequence length.

    Raises
    ------
    UsageError
        ``phase`` for a model that has none (only the LLMs do).
    """
    from tvm_icca.workloads import workload_info  # pylint: disable=import-outside-toplevel

    info = workload_info(name)
    kwargs: dict[str, Any] = {"tiny": tiny}
    if batch is not None:
        kwargs["batch"] = batch
    seq_arg = info["sequence_arg"]
    if phase is not None:
        if phase not in info["phases"]:
            raise UsageError(f"--phase applies to the LLMs of the zoo; {name} has no phase")
        kwargs["phase"] = phase
        if phase != "decode":
            seq_arg = "seq_len"
    if seq_arg is not None and context is not None:
        kwargs[seq_arg] = context
    if layers is not None:
        kwargs["num_layers"] = layers
    if dtype is not None:
        kwargs["dtype"] = dtype
    return kwargs


#: Options that only mean something for a zoo workload.
_ZOO_ONLY = (("batch", "--batch"), ("context", "--context"), ("layers", "--layers"),
             ("dtype", "--dtype"), ("tiny", "--tiny"), ("phase", "--phase"))


def is_onnx_path(model: str) -> bool:
    """Whether MODEL names a file (an ONNX model) rather than a workload of the zoo."""
    return model.lower().endswith(".onnx") or os.sep in model or os.path.exists(model)


def _model_argument(args: argparse.Namespace) -> str:
    if args.model_arg and args.model_opt and args.model_arg != args.model_opt:
        raise UsageError(f"two models given: '{args.model_arg}' and --model '{args.model_opt}'")
    model = args.model_arg or args.model_opt
    if not model:
        raise UsageError("no model given: pass a zoo name (see 'tvm-icca models') or an ONNX "
                         "file (see 'tvm-icca simulate --help')")
    return model


def _load(args: argparse.Namespace, model: str) -> tuple[Any, str, str, dict[str, Any]]:
    """(model for compile_programs, name, description, config) of the MODEL argument,
    after every check of the arguments."""
    from tvm_icca.workloads import (  # pylint: disable=import-outside-toplevel
        canonical_name,
        get_workload,
    )

    if is_onnx_path(model):
        given = [flag for attr, flag in _ZOO_ONLY if getattr(args, attr) not in (None, False)]
        if given:
            raise UsageError(f"{', '.join(given)}: apply only to zoo models; give an ONNX "
                             "model's input shapes with --shape NAME=D1,D2,...")
        if os.path.isdir(model):
            raise UsageError(f"'{model}' is a directory, not an ONNX file")
        if not os.path.isfile(model):
            raise UsageError(f"no such ONNX file: '{model}'")
        shapes = shape_dict(args.shape)
        from tvm_icca.cli.compile_command import check_shape_names
        from tvm_icca.frontend.onnx_loader import (  # pylint: disable=import-outside-toplevel
            load_onnx,
        )

        check_shape_names(model, shapes)

        mod = load_onnx(model, shapes)
        name = os.path.splitext(os.path.basename(model))[0]
        config = {"onnx": model, "shapes": {k: list(v) for k, v in (shapes or {}).items()}}
        return mod, name, f"{model} (ONNX)", config
    if args.shape:
        raise UsageError("--shape applies to ONNX files; a zoo model takes --batch, --context, "
                         "--layers")
    try:
        name = canonical_name(model)
    except KeyError as err:
        raise UsageError(err.args[0]) from None
    workload = get_workload(name, **workload_kwargs(name, args.batch, args.context, args.layers,
                                                    args.dtype, args.tiny, args.phase))
    return workload, name, workload.description, dict(workload.config)


def _run(args: argparse.Namespace) -> int:
    from tvm_icca.drivers.device_programs import (  # pylint: disable=import-outside-toplevel
        compile_programs,
    )
    from tvm_icca.hardware_choice import resolve_hardware  # pylint: disable=import-outside-toplevel
    from tvm_icca.partition.partitioner import (  # pylint: disable=import-outside-toplevel
        host_op_lines,
        host_time_note,
    )
    from tvm_icca.records.apply import optional_database  # pylint: disable=import-outside-toplevel

    model_arg = _model_argument(args)
    if isinstance(args.hw, GpuSpec):
        return _run_gpu(args, model_arg, args.hw)
    hw = resolve_hardware(args.hw)
    progress = args.progress
    model, name, description, config = _load(args, model_arg)
    # an ONNX module has no label of its own: name it after the file (a workload keeps its label)
    named = {} if hasattr(model, "config") else {"name": name}
    if args.design is not None and hw.hbm_bandwidth <= 0:
        raise UsageError(f"--design applies to chips with HBM; '{hw.name}' has none")
    with optional_database(args.database) as tuned:
        compiled = compile_programs(model, hw, progress=progress, preload=args.design,
                                    state=args.state, reuse_layers=args.reuse_layers, **named)
    start = time.perf_counter()
    report = compiled.simulate(trace=bool(args.trace), progress=progress)
    simulate_s = time.perf_counter() - start
    if args.trace:
        report.write_trace(args.trace)
    _warn_power(report)

    if args.json:
        data = report.to_dict(per_op=False)
        data.update(model=name, config=config, compile=compiled.summary(),
                    compile_s=compiled.compile_s, simulate_s=simulate_s,
                    design=compiled.preload.design if compiled.preload is not None else "off",
                    assumed_fields=hw.assumed_fields)
        missing = [k for k in SUMMARY_KEYS if k not in data]
        if missing:  # the contract of --json: never silently drop a summary key
            raise KeyError(f"timing report lacks {missing}")
        print(json.dumps(data, default=_json_default))
        return 0

    summary = compiled.summary()
    print(f"{description} on {hw.name}")
    design = compiled.preload.design if compiled.preload is not None else None
    print("  " + describe_setting(hw.name, design, compiled.state))
    if hw.assumed:
        for line in assumed_lines(hw):
            print("  " + line)
    print(f"  {_count(summary['regions'], 'region call')} ({summary['distinct_regions']} "
          f"distinct), {_count(summary['device_ops'], 'device op')}; Relax ops: "
          f"{summary['offloaded_relax_ops']} offloaded, {summary['host_relax_ops']} on the host")
    for line in host_op_lines(compiled.partition):
        print(f"    {line}")
    host_note = host_time_note(compiled.partition)
    if host_note is not None:
        print(f"    note: {host_note}")
    if summary["split_ops"]:
        print(f"  {summary['split_ops']} operators run as {summary['split_pieces']} "
              "sub-operators: those too large for the chip and their readers (tvm_icca.split)")
    inputs = summary["input_bytes"]
    print("  program inputs: " + ", ".join(f"{src} {format_bytes(inputs.get(src, 0))}"
                                           for src in ("hbm", "host", "chip", "resident")))
    cache = summary["plan_cache"]
    print(f"  compile {compiled.compile_s:.2f} s (plan cache: {cache.get('hits', 0)} hits, "
          f"{cache.get('misses', 0)} misses), simulate {simulate_s:.2f} s")
    if compiled.preload is not None:
        pre = compiled.preload
        print(f"  preload design {pre.design}: planned in {pre.planning_s:.2f} s, "
              f"{pre.preloads} preloads, compiler estimate {format_seconds(pre.estimated_s)}")
    if tuned is not None:
        print("  " + tuned.report().replace("\n", "\n  "))
    print(report.table(max_ops=args.max_ops))
    if args.trace:
        print(f"trace written to {args.trace}")
    return 0


def _run_gpu(args: argparse.Namespace, model_arg: str, gpu: GpuSpec) -> int:
    """``simulate --hw a100|h100|b200``: compile for ``--partition-hw`` and price the device
    programs on the GPU (:func:`runtime_sim.gpu.estimate_gpu`)."""
    # pylint: disable=import-outside-toplevel
    from runtime_sim.gpu import estimate_gpu
    from tvm_icca.drivers.device_programs import compile_programs
    from tvm_icca.partition.partitioner import nothing_on_chip

    for flag, given in (("--design", args.design is not None), ("--trace", bool(args.trace)),
                        ("--database", args.database is not None)):
        if given:
            raise UsageError(f"{flag} applies to ICCA chips; '{gpu.name}' is a GPU reference")
    part_hw = args.partition_hw
    model, name, description, config = _load(args, model_arg)
    named = {} if hasattr(model, "config") else {"name": name}
    compiled = compile_programs(model, part_hw, progress=args.progress, state=args.state,
                                reuse_layers=args.reuse_layers, **named)
    reason = nothing_on_chip(compiled.partition)
    if reason is not None or not compiled.programs:
        raise UsageError(reason or f"model '{name}' has no device program to price")
    start = time.perf_counter()
    report = estimate_gpu(compiled.programs, gpu, model=name)
    simulate_s = time.perf_counter() - start
    if args.json:
        data = report.to_dict(per_op=False)
        data.update(config=config, compile_s=compiled.compile_s, simulate_s=simulate_s,
                    partition_hardware=part_hw.name)
        print(json.dumps(data, default=_json_default))
        return 0
    print(f"{description} on {gpu.name} (GPU reference)")
    print(f"  operators from the programs compiled for {part_hw.name} in "
          f"{compiled.compile_s:.2f} s ({_count(compiled.num_regions, 'region call')}); the GPU reads "
          "their semantics, not their plans")
    print(report.table(max_ops=args.max_ops))
    return 0


def _warn_power(report: Any) -> None:
    """Say on stderr when the run's average power exceeds the system's rated board power
    (:meth:`runtime_sim.contract.energy.RunEnergy.warning`): the chip's per-action energies
    are then too high (the table repeats it; ``--json`` keeps stdout one JSON document)."""
    energy = getattr(report, "energy", None)
    if energy is not None and energy.warning():
        print(f"warning: {energy.warning()}", file=sys.stderr)


def assumed_lines(hw: Any, width: int = 100) -> list[str]:
    """``assumed (not sourced): sync_cycles, ...``: the names of the fields of ``hw`` no cited
    document gives (:attr:`~runtime_sim.contract.hardware.HardwareSpec.assumed`), wrapped to
    ``width``; their reasons are in ``--json``'s ``assumed_fields`` and the docs' hardware
    presets table (a preset with energies assumes a dozen fields: their reasons on one line
    ran to 2,000 characters)."""
    names = ", ".join(name for name, _ in hw.assumed)
    text = f"assumed (not sourced): {names} (the reasons: --json's assumed_fields)"
    return textwrap.wrap(text, width, break_on_hyphens=False, subsequent_indent="    ")


def _json_default(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return str(value)


def _count(n: int, noun: str) -> str:
    """``1 region call``, ``2 region calls``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
