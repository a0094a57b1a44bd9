"""Exception types shared by the compiler and the simulated device.

They live with the device because the device is the lowest layer (it imports neither TVM
nor the compiler); :mod:`tvm_icca` re-exports every one of them, so users catch
``tvm_icca.IccaError`` and never need to know where a class is defined.
"""

from __future__ import annotations


class IccaError(Exception):
    """Base class of every error raised by tvm_icca or its simulated device."""


class InvalidHardwareSpecError(IccaError, ValueError):
    """A :class:`HardwareSpec` field is impossible (zero cores, negative bandwidth, ...)."""


class UnsupportedDtypeError(IccaError, TypeError):
    """The simulated device cannot store or compute a tensor of this dtype."""


class UnsupportedOperatorError(IccaError):
    """An operator's tensor expression cannot be expressed for the device.

    Raised by the compiler when the TE of an offloaded operator has, for instance, a
    non-affine tensor index (reshape's div/mod), a data-dependent index (gather), a
    reduction whose combiner is not sum/max/min, or an op TVM cannot legalize.
    """


class ModelImportError(IccaError):
    """An ONNX file (or other model source) cannot be read or converted to Relax."""


class PlanNotFoundError(IccaError):
    """No compute-shift execution plan of an operator fits the chip."""


class InvalidPlanError(IccaError, ValueError):
    """An execution plan violates a T10 rule (used when a plan is given by hand)."""


class SramOverflowError(IccaError, MemoryError):
    """A core's private SRAM budget would be exceeded."""

    def __init__(self, op: str, core: int, budget_bytes: int, needed_bytes: int):
        self.op = op
        self.core = core
        self.budget_bytes = budget_bytes
        self.needed_bytes = needed_bytes
        super().__init__(
            f"operator '{op}' needs {needed_bytes} bytes of SRAM on core {core}, "
            f"but each core has a budget of {budget_bytes} bytes"
        )


class DeviceProgramError(IccaError, ValueError):
    """A device program is malformed or of an unknown format version."""


class InvalidWorkloadError(IccaError, ValueError):
    """A workload of the zoo was asked for with impossible arguments (batch 0, a negative
    context or layer count, a non-integer size, an unknown dtype)."""


class UnknownWorkloadError(InvalidWorkloadError, KeyError):
    """No workload of the zoo has this name (also a :class:`KeyError`, as a lookup miss)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class InputMismatchError(IccaError, ValueError):
    """An argument of a compiled ICCA executable has the wrong shape, dtype or count."""
