"""``tvm-icca demo`` (and ``make demo``): compile the bundled ONNX encoder layer for "icca" and run it.

The model (``tvm_icca/data/encoder_layer.onnx``: LayerNorm, 4-head self-attention, GELU
feed-forward; sequence 32, width 64) is imported with TVM's ONNX frontend, partitioned for
the chosen chip (IPU Mk2 by default), compiled with ``tvm.compile(mod, target="icca")`` and
run on the simulated device. The output is checked against the same model compiled for TVM's
own CPU target, then the offloaded regions and device statistics are printed. It uses only
the public API (``tvm_icca.*``), as a user would.
"""

from __future__ import annotations

import argparse
import shutil
from importlib import resources
from typing import Any

from runtime_sim.contract.units import format_bytes, format_seconds
from tvm_icca.cli.args import add_hardware_argument, add_progress_argument, writable_path


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("demo", help="compile and run the bundled ONNX encoder layer")
    add_hardware_argument(parser, "chip to run on")
    add_progress_argument(parser)
    parser.add_argument("--write-model", metavar="PATH", type=writable_path, default=None,
                        help="only write the bundled model (input x: float32 [32, 64]) to PATH, "
                             "e.g. model.onnx, to try the other commands on")
    parser.set_defaults(func=_run)
    return parser


def _run(args: argparse.Namespace) -> int:
    if args.write_model is not None:
        return write_demo_model(args.write_model)
    return run_demo(args.hw, progress=args.progress)


def demo_model_path() -> str:
    """Where the bundled encoder layer (the demo's model) is installed."""
    return str(resources.files("tvm_icca") / "data" / "encoder_layer.onnx")


def write_demo_model(path: str) -> int:
    """Copy the bundled model to ``path`` (get_started's first step); 0."""
    shutil.copyfile(demo_model_path(), path)
    print(f"wrote {path}: the bundled ONNX encoder layer (input x: float32 [32, 64])")
    return 0


def run_demo(hw: Any = "ipu-mk2", progress: bool = True) -> int:
    """Compile and run the bundled encoder layer on ``hw`` (anything
    :func:`tvm_icca.use_hardware` takes); print the report; 0 if the output matches TVM's CPU
    build. ``progress``: :attr:`tvm_icca.CompileOptions.progress`."""
    # pylint: disable=import-outside-toplevel
    # Loaded here, not at import: `tvm-icca --help` must not load TVM (see main.py).
    import numpy as np
    import tvm
    from tvm import relax

    import tvm_icca
    from tvm_icca.model_pass import icca_model_passes, preload_summary_of, state_placement_of
    from tvm_icca.model_pass.state_place import describe_setting

    mod = tvm_icca.load_onnx(demo_model_path())
    x = np.random.default_rng(0).standard_normal((32, 64)).astype(np.float32)

    with tvm_icca.use_hardware(hw) as spec:
        partitioned = tvm_icca.partition_for_icca(mod)
        options = tvm_icca.CompileOptions(progress=progress)
        pipeline = tvm_icca.icca_pipeline("icca", options=options)
        # planned here (tvm.compile keeps a planned module) to say where the weights went
        planned = icca_model_passes(spec, options)(partitioned)
        executable = tvm.compile(planned, target="icca", relax_pipeline=pipeline)
    preload = preload_summary_of(planned)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    stats = tvm_icca.last_run_stats()

    reference = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    want = reference["main"](tvm.runtime.tensor(x)).numpy()
    error = float(np.max(np.abs(got - want)))
    ok = np.allclose(got, want, rtol=1e-4, atol=1e-4)

    print(tvm_icca.format_report(tvm_icca.partition_report(partitioned)))
    print()
    print(f"simulated device run on '{spec.name}':")
    print("  " + describe_setting(spec.name, preload.design if preload is not None else None,
                                  state_placement_of(planned)))
    print(f"  regions executed        {stats['regions_executed']}")
    print(f"  cores used (max per op) {stats['cores_used']}")
    print(f"  peak SRAM per core      {format_bytes(stats['peak_sram_bytes_per_core'])}")
    print(f"  bytes shifted           {format_bytes(stats['shift_bytes'])}")
    print(f"  compute-shift steps     {stats['steps']}")
    print(f"  simulated time          {format_seconds(stats['simulated_s'])}")
    print()
    print(f"output {list(got.shape)} vs TVM CPU reference: max abs error {error:.2e} -> "
          f"{'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1
