"""The host side of a device call: the packed function ``icca.device.run``.

Every offloaded region is compiled (by :mod:`tvm_icca.backend.codegen`) into a tiny LLVM function that
calls ``icca.device.run(program_json, *inputs, *outputs)``; this module registers that function.
It parses the device program (cached per program text), hands numpy copies of the inputs to
the simulated device (:func:`runtime_sim.functional.device.get_device`) and copies the results into the
output tensors the Relax VM allocated. The statistics of the last run (the device's counters and
the timing simulator's time) come from :mod:`runtime_sim.run_stats`.

Errors raised by the device cross the VM's C++ frames with their class and attributes intact
(:mod:`tvm_icca.ffi_errors`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import tvm_ffi

from runtime_sim.contract.errors import DeviceProgramError, IccaError, short_name
from runtime_sim.contract.program import parse_program
from tvm_icca.backend.codegen import DEVICE_RUN_FUNC
from tvm_icca.backend.input_check import RUN_BEGIN_FUNC
from tvm_icca.ffi_errors import raise_through_ffi, register_error_types

if TYPE_CHECKING:  # pragma: no cover
    from runtime_sim.functional.device import SimulatedDevice

__all__ = [
    "last_run_stats",
    "parse_program",
    "write_last_run_trace",
    "run_program",
]


# -- the simulators, loaded on first use -------------------------------------------------------
# `import tvm` loads this package (the tvm.backends entry point): a session that only compiles
# should not pay for importing the functional device and the timing simulator (~60 ms).
def get_device() -> "SimulatedDevice":
    """The process-wide simulated device (:func:`runtime_sim.functional.device.get_device`)."""
    from runtime_sim.functional import device  # pylint: disable=import-outside-toplevel

    return device.get_device()


def _run_stats() -> Any:
    from runtime_sim import run_stats  # pylint: disable=import-outside-toplevel

    return run_stats


def _begin_run() -> None:
    """The body of ``icca.device.begin_run``: a call of a compiled function starts a run."""
    _run_stats().reset_stats()


# -- the device call --------------------------------------------------------------------------
def run_program(program_json: str, *tensors: Any) -> None:
    """Run a device program on the simulated device: ``tensors`` = inputs then outputs.

    This is the body of the packed function ``icca.device.run``.
    """
    try:
        _run(str(program_json), tensors)
    except IccaError as err:
        raise_through_ffi(err)
        raise


def _run(program_json: str, tensors: Sequence[Any]) -> None:
    program = parse_program(program_json)
    n_in, n_out = len(program.inputs), len(program.outputs)
    if len(tensors) != n_in + n_out:
        raise DeviceProgramError(
            f"region '{short_name(program.region)}' takes {n_in} input(s) and {n_out} output(s), "
            f"but the host passed {len(tensors)} tensor(s)"
        )
    inputs = [_as_declared(tensor.numpy(), decl.dtype) for tensor, decl in zip(tensors, program.inputs)]
    outputs = tensors[n_in:]
    results = get_device().run(program, inputs)
    if len(results) != n_out:
        raise DeviceProgramError(
            f"the device returned {len(results)} result(s) for region '{short_name(program.region)}', "
            f"which has {n_out} output(s)"
        )
    for name, out, result in zip(program.outputs, outputs, results):
        array = np.asarray(result)
        if tuple(array.shape) != tuple(out.shape):
            raise DeviceProgramError(
                f"output '{name}' of region '{short_name(program.region)}' has shape {tuple(array.shape)} "
                f"on the device but {tuple(out.shape)} on the host"
            )
        # np.asarray(order="C"), not np.ascontiguousarray, which makes a 0-d result 1-d
        if str(out.dtype) == "uint16" and array.dtype != np.uint16:  # bfloat16 bits (see above)
            out.copyfrom(np.asarray(array, dtype="bfloat16", order="C").view(np.uint16))
        else:
            out.copyfrom(np.asarray(array, dtype=str(out.dtype), order="C"))


def _as_declared(array: np.ndarray, dtype: str) -> np.ndarray:
    """A tensor as the program declares it: the stubs pass bfloat16 as its uint16 bit
    pattern (:func:`tvm_icca.backend.codegen._packed_arg` says why)."""
    if dtype == "bfloat16" and array.dtype == np.uint16:
        return array.view(dtype)
    return array


def last_run_stats(*, timing: bool = True) -> dict[str, Any]:
    """Statistics of the last model run (one call of a compiled function) on the simulated device.

    Example::

        vm["main"](*inputs)
        stats = tvm_icca.last_run_stats()
        print(stats["simulated_s"], stats["shift_bytes"])

    Parameters
    ----------
    timing : bool
        Also time the run on the timing simulator (Elk §5): ``simulated_s`` and
        ``simulated_ops``. ``False`` returns the functional device's counters only, without
        the cost of a simulation.

    Returns
    -------
    dict
        Traffic, cores, SRAM, preload and per-region counters of the run and, with ``timing``,
        ``simulated_s`` (``None`` when nothing ran on the chip) and ``simulated_ops``
        (:func:`runtime_sim.run_stats.last_run_stats`). Every key is defined once, with its
        unit, in the metric glossary :mod:`runtime_sim.contract.metrics` (the documentation's
        glossary page).
    """
    return _run_stats().last_run_stats(timing=timing)


def write_last_run_trace(path: str) -> None:
    """Write the Chrome/Perfetto trace of the last model run's simulated timeline.

    The format is that of ``tvm-icca simulate --trace``: open it in https://ui.perfetto.dev
    or ``chrome://tracing``.

    Parameters
    ----------
    path : str
        The JSON file to write.

    Raises
    ------
    IccaError
        The last run executed load-compute-store (VGM) programs, whose timing has no trace.
    DeviceProgramError
        No device program has run yet.
    """
    report = _run_stats().last_run_timing()
    if not hasattr(report, "write_trace"):
        raise IccaError("the last run executed load-compute-store (VGM) programs, whose timing "
                        "has no trace; traces cover compute-shift programs")
    report.write_trace(path)


_INSTALLED = False


def install() -> None:
    """Register ``icca.device.run``, ``icca.device.begin_run`` and the error types with tvm_ffi
    (idempotent)."""
    global _INSTALLED  # pylint: disable=global-statement
    if _INSTALLED:
        return
    register_error_types()
    tvm_ffi.register_global_func(DEVICE_RUN_FUNC, run_program, override=True)
    tvm_ffi.register_global_func(RUN_BEGIN_FUNC, _begin_run, override=True)
    _INSTALLED = True


install()
