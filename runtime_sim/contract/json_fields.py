"""Readers of JSON fields for the contract's ``from_dict`` methods and validation.

Each reader returns the value with its Python type or raises one
:class:`~runtime_sim.contract.errors.DeviceProgramError` naming the field, so a malformed
program never reaches an executor as a ``KeyError`` or ``TypeError``.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Mapping

from runtime_sim.contract.errors import DeviceProgramError

#: Largest extent of an axis or tensor dimension a program may carry (int32 indexing of one
#: dimension; a 70B-parameter model's largest dimension, its vocabulary or context, is < 2**18).
MAX_EXTENT = 2**31 - 1


def quoted(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:30] + "..." + text[-6:]


def read_name(value: Any, what: str, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value):
        raise DeviceProgramError(f"{what} must be a{'' if empty else ' non-empty'} string, not {quoted(value)}")
    return value


def read_int(value: Any, what: str) -> int:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    raise DeviceProgramError(f"{what} must be an integer, not {quoted(value)}")


def read_float(value: Any, what: str) -> float:
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(float(value)):
        return float(value)
    raise DeviceProgramError(f"{what} must be a finite number, not {quoted(value)}")


def read_bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise DeviceProgramError(f"{what} must be true or false, not {quoted(value)}")
    return value


def read_list(value: Any, what: str) -> list:
    if not isinstance(value, (list, tuple)):
        raise DeviceProgramError(f"{what} must be a list, not {type(value).__name__}")
    return list(value)


def read_map(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise DeviceProgramError(f"{what} must be a JSON object, not {type(value).__name__}")
    return value
