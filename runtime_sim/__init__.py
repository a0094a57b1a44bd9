"""The simulated ICCA device (pure numpy; imports neither TVM nor the compiler).

It runs :class:`DeviceProgram` s, the one contract with the compiler, on data: every core's
SRAM, compute steps and inter-core shifts of T10's compute-shift plans (T10 §4.4, §5); and
times them, shapes only (:func:`simulate_timing`, Elk §5 "Simulation framework").
"""

from .constants import decode_constant, encode_constant, encode_constants
from .device import SimulatedDevice, get_device, last_run_stats, reset_stats
from .errors import (
    DeviceProgramError,
    IccaError,
    InvalidHardwareSpecError,
    InvalidPlanError,
    ModelImportError,
    PlanNotFoundError,
    SramOverflowError,
    UnsupportedDtypeError,
)
from .expr_eval import ExprEvaluator, erf, evaluate
from .hardware import PRESET_NAMES, HardwareSpec, preset, small_chip
from .layout import OpLayout, ShiftEvent
from .program import (
    PROGRAM_VERSION,
    AffineIndex,
    Axis,
    DeviceProgram,
    ExecutionPlan,
    Gather,
    OpProgram,
    TensorAccess,
    TensorDecl,
    TensorExpr,
)
from .timing import OpTiming, TimingReport, simulate_timing  # after .hardware: it imports schedules

__all__ = [
    "AffineIndex",
    "Axis",
    "DeviceProgram",
    "DeviceProgramError",
    "ExecutionPlan",
    "ExprEvaluator",
    "HardwareSpec",
    "IccaError",
    "InvalidHardwareSpecError",
    "InvalidPlanError",
    "ModelImportError",
    "OpLayout",
    "OpProgram",
    "OpTiming",
    "PRESET_NAMES",
    "PROGRAM_VERSION",
    "PlanNotFoundError",
    "ShiftEvent",
    "SimulatedDevice",
    "SramOverflowError",
    "Gather",
    "TensorAccess",
    "TensorDecl",
    "TensorExpr",
    "TimingReport",
    "UnsupportedDtypeError",
    "decode_constant",
    "encode_constant",
    "encode_constants",
    "erf",
    "evaluate",
    "get_device",
    "last_run_stats",
    "preset",
    "reset_stats",
    "simulate_timing",
    "small_chip",
]
