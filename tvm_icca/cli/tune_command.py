"""``tvm-icca tune``: tune a model's ICCA execution plans and keep the records.

Examples::

    tvm-icca tune resnet18 --hw ipu-mk2 --work-dir tuning/resnet18 --trials 32 --jobs 2
    tvm-icca tune model.onnx --shape input=1,3,224,224 --work-dir tuning/mine

The model is a zoo workload or an ONNX file (as for ``tvm-icca simulate``). A session
(:func:`tvm_icca.tune`) resumes from what ``--work-dir`` holds. At the end the model is
compiled with the records (:func:`tvm_icca.use_database`), which reports the operators that
used tuned plans, and timed untuned and tuned on the simulated chip.
"""

from __future__ import annotations

import argparse

from runtime_sim.contract.units import format_seconds
from tvm_icca.cli.args import (
    add_hardware_argument,
    add_model_arguments,
    add_progress_argument,
    positive_int,
)


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "tune", help="tune a model's execution plans on the simulated chip (meta_schedule records)",
        description="Measure candidate execution plans of every ICCA operator of a model on the "
        "simulated chip, rank them with a learned cost model and keep the measurements as "
        "meta_schedule tuning records in --work-dir; then compile with the best records.",
    )
    add_model_arguments(parser, "resnet18")
    parser.add_argument("--work-dir", required=True, metavar="DIR",
                        help="directory of the tuning records (created; resumed if present)")
    parser.add_argument("--trials", type=positive_int, default=32,
                        help="measurements per operator, earlier sessions' included (default 32)")
    add_hardware_argument(parser, "chip to tune for")
    parser.add_argument("--jobs", type=positive_int, default=1,
                        help="worker processes measuring plans (default 1)")
    parser.add_argument("--max-tasks", type=positive_int, default=None,
                        help="tune only the N heaviest operators")
    add_progress_argument(parser)
    parser.set_defaults(func=_run)
    return parser


def _run(args: argparse.Namespace) -> int:
    from tvm_icca.cli.simulate_command import _load, _model_argument
    from tvm_icca.drivers.device_programs import (  # pylint: disable=import-outside-toplevel
        compile_programs,
    )
    from tvm_icca.hardware_choice import resolve_hardware  # pylint: disable=import-outside-toplevel
    from tvm_icca.records.apply import use_database  # pylint: disable=import-outside-toplevel
    from tvm_icca.model_pass.state_place import (  # pylint: disable=import-outside-toplevel
        StatePlacement,
        per_operator_state,
    )
    from tvm_icca.tuning import tune  # pylint: disable=import-outside-toplevel

    model_arg = _model_argument(args)
    hw = resolve_hardware(args.hw)
    model, name, description, _ = _load(args, model_arg)
    named = {} if hasattr(model, "config") else {"name": name}
    progress = args.progress
    summary = tune(model, args.work_dir, hw, max_trials=args.trials, jobs=args.jobs,
                   max_tasks=args.max_tasks, progress=progress)
    # records are per operator: both sides of the comparison plan operator by operator
    state = per_operator_state(hw)
    print(f"{description} on {hw.name}")
    print("  " + StatePlacement(state, "tuning measures per-operator plans (a model kept on "
                                       "chip is planned jointly, without records)").describe())
    print(summary.table())
    untuned = compile_programs(model, hw, progress=progress, state=state,
                               **named).simulate(progress=progress)
    with use_database(args.work_dir) as tuned:
        compiled = compile_programs(model, hw, progress=progress, state=state, **named)
    report = compiled.simulate(progress=progress)
    print(tuned.report())
    print(f"simulated latency: untuned {format_seconds(untuned.total_s)}, tuned "
          f"{format_seconds(report.total_s)} ({untuned.total_s / report.total_s:.3f}x)")
    return 0
