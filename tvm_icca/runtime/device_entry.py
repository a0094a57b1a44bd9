"""The host side of a device call: the packed function ``icca.device.run``.

Every offloaded region is compiled (by :mod:`tvm_icca.backend.codegen`) into a tiny LLVM function that
calls ``icca.device.run(program_json, *inputs, *outputs)``; this module registers that function.
It parses the device program (cached per program text), hands numpy copies of the inputs to
the simulated device (:func:`runtime_sim.functional.device.get_device`) and copies the results into the
output tensors the Relax VM allocated. The statistics of the last run (the device's counters and
the timing simulator's time) come from :mod:`runtime_sim.run_stats`.

Errors
------
``tvm_ffi`` turns a Python exception raised inside a packed function into an FFI error of a
*kind* (looked up by the exception's exact type, ``RuntimeError`` if unregistered) and a message,
and turns it back into a Python exception when it reaches Python again, by calling the class
registered for that kind with the message. Measured with apache-tvm-ffi 0.1.14 and the Relax VM:
an unregistered ``IccaError`` reaches the caller of ``vm["main"](...)`` as a plain
``RuntimeError`` with the same message; a registered one keeps its class. So every
:class:`~runtime_sim.contract.errors.IccaError` type is registered here (see :func:`raise_through_ffi`), and
the exception object raised by the device is handed back as is -- attributes such as
``SramOverflowError.budget_bytes`` included -- when it resurfaces on the same thread.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Sequence

import numpy as np
import tvm_ffi

from runtime_sim import run_stats
from runtime_sim.contract import errors as _errors
from runtime_sim.contract.errors import DeviceProgramError, IccaError, short_name
from runtime_sim.contract.program import DeviceProgram
from runtime_sim.functional.device import get_device

__all__ = [
    "DEVICE_RUN_FUNC",
    "last_run_stats",
    "parse_program",
    "write_last_run_trace",
    "raise_through_ffi",
    "register_error_types",
    "run_program",
]

#: Name of the packed function the per-region stubs call.
DEVICE_RUN_FUNC = "icca.device.run"


# -- error propagation through tvm_ffi --------------------------------------------------------
_PENDING = threading.local()  # the last IccaError raised into C++ on this thread
_REGISTERED: set[type] = set()


def _reviver(cls: type[IccaError]) -> type:
    """A stand-in class that tvm_ffi calls with the message to rebuild an error of ``cls``.

    tvm_ffi requires a *type* there and calls it with the message; ``__new__`` returning an
    instance of ``cls`` (not of the stand-in) skips ``__init__``. It returns the very exception
    object that was raised when it is the pending one of this thread; otherwise (e.g. raised in
    another thread) a new ``cls`` instance carrying the message, made without ``cls.__init__``
    because some classes (:class:`~runtime_sim.contract.errors.SramOverflowError`) do not take a single
    message.
    """

    def __new__(_stand_in: type, message: str) -> BaseException:
        pending = getattr(_PENDING, "error", None)
        if pending is not None and type(pending) is cls and str(pending) == message:
            # Not cleared: a pass written in Python re-crosses C++ and revives it again.
            # tvm_ffi appends the frames recorded in the FFI error, which already include
            # this object's own traceback: drop it so frames are not listed twice.
            return pending.with_traceback(None)
        err = cls.__new__(cls)
        Exception.__init__(err, message)
        return err

    return type(f"_Revive{cls.__name__}", (), {"__new__": __new__, "__module__": __name__})


def _register(cls: type[IccaError]) -> None:
    if cls in _REGISTERED:
        return
    kind = f"{cls.__module__}.{cls.__qualname__}"
    # Python -> FFI: the kind of an exception is looked up by its exact type.
    tvm_ffi.register_error(kind, cls)
    # FFI -> Python: the registered callable gets the message (overrides the line above).
    tvm_ffi.register_error(kind, _reviver(cls))
    _REGISTERED.add(cls)


def register_error_types() -> None:
    """Register every error class of :mod:`runtime_sim.contract.errors` with tvm_ffi (idempotent)."""
    for value in vars(_errors).values():
        if isinstance(value, type) and issubclass(value, IccaError):
            _register(value)


def raise_through_ffi(err: IccaError) -> None:
    """Prepare ``err`` to cross a C++ frame (VM, RunCodegen) and come out unchanged.

    Call it in an ``except`` block right before re-raising; it registers the error's class
    (subclasses defined elsewhere, too) and remembers the object for :func:`_reviver`.
    """
    _register(type(err))
    _PENDING.error = err


# -- the device call --------------------------------------------------------------------------
@functools.lru_cache(maxsize=128)
def parse_program(program_json: str) -> DeviceProgram:
    """Parse a device program; the same program text is parsed once (the stub passes the same
    string at every call)."""
    return DeviceProgram.from_json(program_json)


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
        if str(out.dtype) == "uint16" and array.dtype != np.uint16:  # bfloat16 bits (see above)
            out.copyfrom(np.ascontiguousarray(array, dtype="bfloat16").view(np.uint16))
        else:
            out.copyfrom(np.ascontiguousarray(array, dtype=str(out.dtype)))


def _as_declared(array: np.ndarray, dtype: str) -> np.ndarray:
    """A tensor as the program declares it: the stubs pass bfloat16 as its uint16 bit
    pattern (:func:`tvm_icca.backend.codegen._packed_arg` says why)."""
    if dtype == "bfloat16" and array.dtype == np.uint16:
        return array.view(dtype)
    return array


def last_run_stats(*, timing: bool = True) -> dict[str, Any]:
    """Statistics of the last model run on the simulated device: traffic, cores, SRAM, and
    (unless ``timing=False``) ``simulated_s`` and ``simulated_ops``, the timing simulator over
    exactly the programs that ran, in call order
    (:func:`runtime_sim.run_stats.last_run_stats`)."""
    return run_stats.last_run_stats(timing=timing)


def write_last_run_trace(path: str) -> None:
    """Write the Chrome/Perfetto trace of the last model run's simulated timeline (the format
    of ``tvm-icca simulate --trace``)."""
    report = run_stats.last_run_timing()
    if not hasattr(report, "write_trace"):
        raise IccaError("the last run executed load-compute-store (VGM) programs, whose timing "
                        "has no trace; traces cover compute-shift programs")
    report.write_trace(path)


_INSTALLED = False


def install() -> None:
    """Register ``icca.device.run`` and the error types with tvm_ffi (idempotent)."""
    global _INSTALLED  # pylint: disable=global-statement
    if _INSTALLED:
        return
    register_error_types()
    tvm_ffi.register_global_func(DEVICE_RUN_FUNC, run_program, override=True)
    _INSTALLED = True


install()
