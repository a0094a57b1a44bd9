"""``tvm-icca compile``: an ONNX model to a library for the simulated ICCA chip.

Example::

    tvm-icca compile model.onnx -o model.so --hw ipu-mk2 [--shape input=1,3,224,224]
    tvm-icca run model.so --check model.onnx

The model is imported with :func:`tvm_icca.load_onnx`, partitioned for the chip
(:func:`tvm_icca.partition_for_icca`; the report of what is offloaded and what stays on the
host, with the reasons, is printed), compiled with :func:`tvm_icca.compile` (``tvm.compile``
for target ``icca``) and exported with ``export_library``; ``tvm.runtime.load_module``
reloads it in any process where tvm_icca is installed.

The library carries its own input signature: a Relax function ``icca_signature`` returning
a JSON string (names, shapes and dtypes of ``main``'s inputs, the ONNX output names, the chip
and the ``--shape`` values). A Relax VM executable keeps its parameters' names but not their
shapes or dtypes, and a file beside the library would not survive copying it alone; ``tvm-icca
run`` reads this function to make random inputs and to check ``--inputs``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from tvm_icca.cli.args import (
    UsageError,
    add_hardware_argument,
    add_progress_argument,
    add_layer_reuse_argument,
    add_state_argument,
    existing_file,
    shape_arg,
    shape_dict,
    tuning_records,
    writable_path,
)
from tvm_icca.model_pass.planner import PRELOAD_CHOICES

#: Name of the Relax function that returns the library's signature (JSON).
SIGNATURE_FUNCTION = "icca_signature"
SIGNATURE_VERSION = 1


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "compile", help="compile an ONNX model for the ICCA chip into a loadable library",
        description="Import an ONNX model, partition it for the ICCA chip, compile it with "
        "tvm.compile(target='icca') and export the library (tvm.runtime.load_module reloads "
        "it; run it with `tvm-icca run`).",
    )
    parser.add_argument("model", type=existing_file, help="ONNX file")
    parser.add_argument("-o", "--output", type=writable_path, default=None, metavar="LIB",
                        help="library to write (default: the model's name with .so, in the "
                        "current directory)")
    add_hardware_argument(parser, "chip to compile for")
    add_state_argument(parser)
    add_layer_reuse_argument(parser)
    parser.add_argument("--design", default=None, choices=PRELOAD_CHOICES,
                        help="HBM preload design on a chip with HBM (Elk §6.1; default elk-full)")
    parser.add_argument("--shape", action="append", type=shape_arg, metavar="NAME=D1,D2,...",
                        help="static shape of an input with symbolic dimensions (repeatable)")
    parser.add_argument("--database", metavar="DIR", type=tuning_records, default=None,
                        help="tuning records (the --work-dir of `tvm-icca tune`): compile with "
                        "the best measured plan of every operator that has one")
    add_progress_argument(parser)
    parser.set_defaults(func=_run)
    return parser


def default_output(model: str) -> str:
    return os.path.splitext(os.path.basename(model))[0] + ".so"


def onnx_io_names(model: str) -> tuple[list[str], list[str]]:
    """The graph's input names (initializers excluded) and output names, in order."""
    inputs, outputs = _onnx_io(model)
    return list(inputs or {}), outputs


def _onnx_io(model: str) -> tuple[dict[str, list[int | str | None]] | None, list[str]]:
    """Input name -> dims (int, a symbol, or None) and the output names of an ONNX graph
    (``None`` inputs if the file is no ONNX protobuf)."""
    import onnx  # pylint: disable=import-outside-toplevel

    from tvm_icca.frontend.onnx_inputs import graph_inputs  # pylint: disable=import-outside-toplevel

    try:
        graph = onnx.load(model, load_external_data=False).graph
    except Exception:  # pylint: disable=broad-except
        return None, []
    return graph_inputs(graph), [o.name for o in graph.output]


def signature_of(mod: Any, model: str, hw: str, shapes: dict[str, tuple[int, ...]] | None) -> dict[str, Any]:
    """The signature stored in the library (see the module docstring)."""
    from tvm_icca.ops.relax_types import static_shape  # pylint: disable=import-outside-toplevel

    onnx_inputs, onnx_outputs = onnx_io_names(model)
    params = list(mod["main"].params)
    inputs = []
    for i, param in enumerate(params):
        ty = param.ty
        shape = static_shape(ty)
        inputs.append({
            "name": str(param.name),
            "onnx_name": onnx_inputs[i] if len(onnx_inputs) == len(params) else str(param.name),
            "shape": None if shape is None else list(shape),
            "dtype": str(getattr(ty, "dtype", "")) or None,
        })
    return {
        "version": SIGNATURE_VERSION,
        "model": os.path.basename(model),
        "hardware": hw,
        "shapes": {k: list(v) for k, v in (shapes or {}).items()},
        "inputs": inputs,
        "outputs": onnx_outputs,
    }


def with_signature(mod: Any, signature: dict[str, Any]) -> Any:
    """``mod`` plus the Relax function ``icca_signature() -> str``."""
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm import relax  # pylint: disable=import-outside-toplevel

    builder = relax.BlockBuilder()
    with builder.function(SIGNATURE_FUNCTION, []):
        builder.emit_func_output(tvm.ir.StringImm(json.dumps(signature, sort_keys=True)))
    sig_mod = builder.get()
    functions = dict(mod.functions.items())
    functions[sig_mod.get_global_var(SIGNATURE_FUNCTION)] = sig_mod[SIGNATURE_FUNCTION]
    return tvm.IRModule(functions, attrs=mod.attrs)


def read_signature(vm: Any) -> dict[str, Any] | None:
    """The signature a library compiled by ``tvm-icca compile`` carries, else ``None``."""
    try:
        text = str(vm[SIGNATURE_FUNCTION]())
    except Exception:  # pylint: disable=broad-except  (a library built otherwise)
        return None
    try:
        signature = json.loads(text)
    except ValueError:
        return None
    return signature if isinstance(signature, dict) and "inputs" in signature else None


def _run(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    from tvm_icca.drivers.compile_api import compile as icca_compile
    from tvm_icca.frontend.onnx_loader import load_onnx
    from tvm_icca.partition.partitioner import (
        format_report,
        host_op_lines,
        host_time_note,
        nothing_on_chip,
        partition_for_icca,
        partition_report,
    )
    from tvm_icca.model_pass import (
        CompileOptions,
        icca_model_passes,
        preload_summary_of,
        state_placement_of,
    )
    from tvm_icca.model_pass.state_place import describe_setting
    from tvm_icca.records.apply import optional_database

    hw = args.hw  # resolved by --hw (tvm_icca.cli.args.hardware_arg)
    if args.design is not None and hw.hbm_bandwidth <= 0:
        raise UsageError(f"--design applies to chips with HBM; '{hw.name}' has none")
    output = args.output or default_output(args.model)
    if os.path.abspath(output) == os.path.abspath(args.model):
        raise UsageError(f"the output '{output}' would overwrite the model")
    shapes = shape_dict(args.shape)
    check_shape_names(args.model, shapes)
    mod = load_onnx(args.model, shapes)
    partitioned = partition_for_icca(mod, hw)
    report = partition_report(partitioned, hw)
    print(format_report(report))
    host_note = host_time_note(report)
    if host_note is not None and report["regions"]:
        print(f"  note: {host_note}")
    reason = nothing_on_chip(report)
    if reason is not None:  # a valid host-only library, but not what the user asked for
        print(f"tvm-icca: warning: {reason}", file=sys.stderr)
    with optional_database(args.database) as tuned:
        # planned here (tvm.compile skips a planned module) to say where the weights went
        options = CompileOptions(state=args.state, preload=args.design, progress=args.progress,
                                 reuse_layers=args.reuse_layers)
        planned = icca_model_passes(hw, options)(partitioned)
        placement = state_placement_of(planned)
        pre = preload_summary_of(planned)
        print(describe_setting(hw.name, pre.design if pre is not None else None, placement))
        signature = signature_of(mod, args.model, hw.name, shapes)
        signature["state"] = placement.place if placement is not None else None
        # for `tvm-icca run` to name what ran on the host CPU and why
        signature["host_ops"] = host_op_lines(report)
        signature["host_note"] = host_note if report["regions"] else None
        executable = icca_compile(with_signature(planned, signature), hw, progress=args.progress)
    if tuned is not None:
        print(tuned.report())
    executable.export_library(output)
    print(f"wrote {output} (run it with: tvm-icca run {output})")
    return 0


def check_shape_names(model: str, shapes: dict[str, tuple[int, ...]] | None) -> None:
    """Every ``--shape`` names an input of the ONNX graph, with its rank and its fixed
    dimensions, and no input is left with symbolic dimensions (the rules of
    :mod:`tvm_icca.frontend.onnx_inputs`, which ``load_onnx`` applies too; here they are usage
    errors, exit 2)."""
    # pylint: disable=import-outside-toplevel
    from tvm_icca.frontend.onnx_inputs import (
        listed_inputs,
        shape_flags,
        shape_problem,
        suggested_shapes,
        unbound_inputs,
    )

    inputs, _ = _onnx_io(model)
    if inputs is None:  # a bad file is a bad argument: exit 2, before any work
        raise UsageError(f"'{model}' is not a readable ONNX model (no ONNX protobuf could be "
                         "parsed from it)")
    for name, shape in (shapes or {}).items():
        problem = shape_problem(inputs, name, shape)
        if problem is not None:
            raise UsageError(f"--shape {name}: {problem}")
    unbound = unbound_inputs(inputs, shapes)
    if unbound:
        raise UsageError(f"input(s) {listed_inputs(unbound)} of {model} have symbolic dimensions "
                         "and the chip runs static shapes: bind them, e.g. "
                         f"{shape_flags(suggested_shapes(unbound))}")
