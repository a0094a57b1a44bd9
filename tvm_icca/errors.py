"""Error types of tvm_icca.

Every class is defined once, in :mod:`runtime_sim.contract.errors` (the device is the lowest layer and
must not import the compiler); this module re-exports all of them -- also classes added there
later -- so users write ``except tvm_icca.IccaError`` without knowing where a class lives.
"""

import runtime_sim.contract.errors as _errors
from runtime_sim.contract.errors import (
    DeviceProgramError,
    IccaError,
    InvalidHardwareSpecError,
    InvalidPlanError,
    ModelImportError,
    PlanNotFoundError,
    SramOverflowError,
    UnsupportedDtypeError,
)

#: Every error class of :mod:`runtime_sim.contract.errors`, by name.
ERROR_TYPES: dict[str, type[IccaError]] = {
    name: value
    for name, value in vars(_errors).items()
    if isinstance(value, type) and issubclass(value, IccaError)
}
globals().update(ERROR_TYPES)

__all__ = sorted(ERROR_TYPES)
