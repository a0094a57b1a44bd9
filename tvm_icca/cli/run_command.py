"""``tvm-icca run``: run a library built by ``tvm-icca compile`` on the simulated chip.

Example::

    tvm-icca run model.so                          # random inputs (seed 0)
    tvm-icca run model.so --inputs x.npz --check model.onnx --trace run.json

The library is loaded with ``tvm.runtime.load_module`` and run by ``relax.VirtualMachine``
on the CPU, its ICCA regions on the simulated device. Inputs come from ``--inputs`` (an
``.npz`` whose keys are the input names, or ``arr_0``, ``arr_1``, ... in order) or are drawn
at random from the signature the library carries (:mod:`tvm_icca.cli.compile_command`). Prints
every output's name, shape and dtype, the device statistics of the run
(:func:`tvm_icca.last_run_stats`) and the simulated time on the chip. ``--check model.onnx``
compiles the ONNX model for TVM's CPU target (``llvm``), runs it on the same inputs and
compares the outputs (exit status 1 on a mismatch); a model whose inputs are not the
library's (:mod:`tvm_icca.cli.model_match`) is a usage error (exit status 2) before anything runs.
"""

from __future__ import annotations

import argparse
from typing import Any, Sequence

from tvm_icca.cli.args import (
    UsageError,
    add_progress_argument,
    existing_file,
    nonneg_float,
    nonneg_int,
    writable_path,
)
from runtime_sim.contract.errors import LibraryLoadError
from runtime_sim.contract.units import format_bytes, format_seconds
from tvm_icca.device_call.library import EXPECTED, first_line, load_library
from tvm_icca.cli.model_match import check_model_matches_library
from tvm_icca.model_pass.state_place import STATE_WORDS


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "run", help="run a library from `tvm-icca compile` on the simulated chip",
        description="Load a library built by `tvm-icca compile`, run it on the simulated ICCA "
        "chip and print its outputs, device statistics and simulated time.",
    )
    parser.add_argument("library", type=existing_file, help="library from `tvm-icca compile`")
    parser.add_argument("--inputs", type=existing_file, metavar="NPZ",
                        help="inputs as an .npz (keys: input names, or arr_0, arr_1, ... in "
                        "order); default: random inputs")
    parser.add_argument("--seed", type=nonneg_int, default=0,
                        help="seed of the random inputs (default 0)")
    parser.add_argument("--check", type=existing_file, metavar="ONNX",
                        help="compare the outputs with this ONNX model compiled for TVM's CPU "
                        "target")
    parser.add_argument("--rtol", type=nonneg_float, default=1e-4,
                        help="relative tolerance of --check (default 1e-4)")
    parser.add_argument("--atol", type=nonneg_float, default=1e-4,
                        help="absolute tolerance of --check (default 1e-4)")
    parser.add_argument("--save", type=writable_path, metavar="NPZ",
                        help="write the inputs and outputs to an .npz")
    parser.add_argument("--trace", type=writable_path, metavar="PATH",
                        help="write the Chrome/Perfetto trace of the run's simulated timeline")
    add_progress_argument(parser)
    parser.set_defaults(func=_run)
    return parser


def _load_vm(path: str) -> Any:
    """The Relax VM of the library at ``path``; anything else is one
    :class:`~runtime_sim.contract.errors.LibraryLoadError` naming the file and what was expected."""
    # pylint: disable=import-outside-toplevel
    import tvm
    from tvm import relax

    lib = load_library(path)
    try:
        return relax.VirtualMachine(lib, tvm.cpu())
    except Exception as err:  # pylint: disable=broad-except
        raise LibraryLoadError(f"'{path}' is a shared library but holds no TVM Relax executable "
                               f"({first_line(err)}); expected {EXPECTED}") from None


def _input_specs(vm: Any, signature: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per input of ``main``: name, onnx_name, shape (None if unknown) and dtype."""
    if signature is not None:
        return list(signature["inputs"])
    arity = vm._get_function_arity("main")  # pylint: disable=protected-access
    names = [vm._get_function_param_name("main", i) for i in range(arity)]  # pylint: disable=protected-access
    return [{"name": n, "onnx_name": n, "shape": None, "dtype": None} for n in names]


def random_inputs(specs: Sequence[dict[str, Any]], seed: int) -> list[Any]:
    """Inputs drawn at random: standard normal floats, integers in [0, 10), random booleans."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    rng = np.random.default_rng(seed)
    arrays = []
    for spec in specs:
        if spec["shape"] is None or not spec["dtype"]:
            raise UsageError(f"the library does not record the shape of input '{spec['name']}' "
                             "(not built by `tvm-icca compile`, or a symbolic shape): pass "
                             "--inputs x.npz")
        shape, dtype = tuple(spec["shape"]), np.dtype(spec["dtype"])
        if dtype.kind == "f":
            arrays.append(rng.standard_normal(shape).astype(dtype))
        elif dtype.kind in "iu":
            arrays.append(rng.integers(0, 10, size=shape).astype(dtype))
        elif dtype.kind == "b":
            arrays.append(rng.integers(0, 2, size=shape).astype(bool))
        else:
            raise UsageError(f"cannot draw random inputs of dtype {dtype} for '{spec['name']}': "
                             "pass --inputs x.npz")
    return arrays


def read_inputs(path: str, specs: Sequence[dict[str, Any]]) -> list[Any]:
    """The inputs of an .npz, by name (Relax or ONNX name) or ``arr_<i>``, checked against the
    signature's shapes and dtypes."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    try:
        with np.load(path, allow_pickle=False) as data:
            stored = {key: data[key] for key in data.files}
    except Exception as err:  # pylint: disable=broad-except
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise UsageError(f"cannot read inputs from '{path}': not an .npz of arrays ({first})") from None
    arrays, used = [], set()
    for i, spec in enumerate(specs):
        keys = [spec["name"], spec.get("onnx_name") or spec["name"], f"arr_{i}"]
        key = next((k for k in keys if k in stored), None)
        if key is None:
            raise UsageError(f"'{path}' has no input '{spec['name']}' (nor arr_{i}); it has: "
                             f"{', '.join(sorted(stored)) or 'nothing'}")
        used.add(key)
        array = stored[key]
        if spec["shape"] is not None and list(array.shape) != list(spec["shape"]):
            raise UsageError(f"input '{spec['name']}' in '{path}' has shape {list(array.shape)}, "
                             f"the model takes {spec['shape']}")
        if spec["dtype"] and str(array.dtype) != spec["dtype"]:
            raise UsageError(f"input '{spec['name']}' in '{path}' has dtype {array.dtype}, the "
                             f"model takes {spec['dtype']}")
        arrays.append(array)
    extra = sorted(set(stored) - used)
    if extra:
        raise UsageError(f"'{path}' has arrays the model does not take: {', '.join(extra)}")
    return arrays


def flatten_outputs(value: Any) -> list[Any]:
    """The tensors of a VM result (a tensor or nested tuples of tensors) as numpy arrays."""
    if hasattr(value, "numpy"):
        return [value.numpy()]
    out: list[Any] = []
    for item in value:
        out.extend(flatten_outputs(item))
    return out


def run_vm(vm: Any, arrays: Sequence[Any]) -> list[Any]:
    import tvm  # pylint: disable=import-outside-toplevel

    return flatten_outputs(vm["main"](*[tvm.runtime.tensor(a) for a in arrays]))


def reference_outputs(onnx_path: str, signature: dict[str, Any] | None,
                      arrays: Sequence[Any]) -> list[Any]:
    """Outputs of the ONNX model compiled for TVM's CPU target on the same inputs: the
    reference build of the test suite's device runs
    (:func:`tvm_icca.testing.device_runs.reference_build`: unoptimized LLVM code loaded as a
    library, a fraction of the CPU of TVM's LLVM JIT at ``-O3``, 0.2 against 0.9 s for a
    small MLP or encoder layer)."""
    # pylint: disable=import-outside-toplevel
    import tvm
    from tvm import relax

    from tvm_icca.frontend.onnx_loader import load_onnx
    from tvm_icca.testing.device_runs import reference_build

    # the library's input shapes bind the model's (model_match checked that they can), so a
    # model exported with a dynamic batch checks a library compiled at a fixed one
    shapes = {s["onnx_name"]: s["shape"] for s in (signature or {}).get("inputs", [])
              if s.get("onnx_name") and s.get("shape")} or None
    mod = load_onnx(onnx_path, shapes)
    reference = relax.VirtualMachine(reference_build(mod), tvm.cpu())
    return run_vm(reference, arrays)


def _run(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    import numpy as np

    from tvm_icca.cli.compile_command import read_signature
    from tvm_icca.device_call import device_entry

    vm = _load_vm(args.library)
    signature = read_signature(vm)
    specs = _input_specs(vm, signature)
    if args.check:  # a model other than the library's is found before anything runs
        check_model_matches_library(args.check, args.library, specs)
    arrays = read_inputs(args.inputs, specs) if args.inputs else random_inputs(specs, args.seed)
    outputs = run_vm(vm, arrays)
    stats = device_entry.last_run_stats()
    if args.trace:
        device_entry.write_last_run_trace(args.trace)

    names = list((signature or {}).get("outputs") or [])
    if len(names) != len(outputs):
        names = [f"output_{i}" for i in range(len(outputs))]
    source = f"'{args.inputs}'" if args.inputs else f"random, seed {args.seed}"
    hw = f" on '{signature['hardware']}'" if signature and signature.get("hardware") else ""
    state = (signature or {}).get("state")
    weights = f", weights {STATE_WORDS[state]}" if state in STATE_WORDS else ""
    print(f"{args.library}{hw}{weights}: {len(arrays)} input(s) ({source}), "
          f"{len(outputs)} output(s)")
    for spec, array in zip(specs, arrays):
        print(f"  input  {spec['name']:<20} {str(list(array.shape)):<20} {array.dtype}")
    for name, array in zip(names, outputs):
        print(f"  output {name:<20} {str(list(array.shape)):<20} {array.dtype}")
    print("device run statistics:")
    for key, value in stats.items():
        if isinstance(value, (bool, int, float, str)) and key != "simulated_s":
            # the exact count (the glossary's value), and for bytes the size a person reads
            readable = (f"  ({format_bytes(value)})" if "_bytes" in key and value >= 1024
                        and not isinstance(value, bool) else "")
            print(f"  {key:<28} {value}{readable}")
    if stats.get("simulated_s") is not None:
        print(f"simulated time on the chip: {format_seconds(float(stats['simulated_s']))}")
    elif "simulated_s" in stats:
        print("nothing ran on the chip (see the partition report of `tvm-icca compile`)")
    host = (signature or {}).get("host_ops") or []
    if host:
        print(f"on the host CPU ({len(host)} op kind(s)):")
        for line in host:
            print(f"  {line}")
        if signature.get("host_note") and stats.get("simulated_s") is not None:
            print(f"  note: {signature['host_note']}")
    if args.trace:
        print(f"trace written to {args.trace}")
    if args.save:
        np.savez(args.save, **{f"input_{s['name']}": a for s, a in zip(specs, arrays)},
                 **{f"output_{n}": a for n, a in zip(names, outputs)})
        print(f"inputs and outputs written to {args.save}")

    if not args.check:
        return 0
    want = reference_outputs(args.check, signature, arrays)
    if len(want) != len(outputs):
        print(f"check against {args.check} (TVM llvm): {len(want)} outputs vs {len(outputs)} "
              "-> MISMATCH")
        return 1
    ok = True
    print(f"check against {args.check} compiled for TVM's CPU target (rtol {args.rtol}, "
          f"atol {args.atol}):")
    for name, got, ref in zip(names, outputs, want):
        if got.shape != ref.shape:
            print(f"  {name}: shape {list(got.shape)} vs {list(ref.shape)} -> MISMATCH")
            ok = False
            continue
        error = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64)))) if got.size else 0.0
        match = bool(np.allclose(got, ref, rtol=args.rtol, atol=args.atol, equal_nan=True))
        ok &= match
        print(f"  {name}: max abs error {error:.3e} -> {'OK' if match else 'MISMATCH'}")
    print("check passed" if ok else "check FAILED")
    return 0 if ok else 1
