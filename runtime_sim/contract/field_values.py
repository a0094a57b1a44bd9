"""Reading a value given for a :class:`~runtime_sim.contract.hardware.HardwareSpec` field as
its type.

A spec is built from Python, JSON, TOML and command-line strings alike, so one reading rule
serves every way in: integers may be ``int``, numpy integers, integral floats or numeric
strings; numbers any finite real or numeric string; mappings a mapping or ``(key, value)``
pairs. Booleans, ``None``, NaN and infinities are refused, here, once for every field.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Mapping


def as_pairs(value: Any) -> list[tuple[Any, Any]] | None:
    """A mapping field given as a mapping (JSON object, TOML table) or as ``(key, value)``
    pairs (its stored form), as a list of pairs with distinct string keys; None otherwise."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, (list, tuple)) and all(
            isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        items = [tuple(p) for p in value]
    else:
        return None
    keys = [k for k, _ in items]
    if any(not isinstance(k, str) for k in keys) or len(set(keys)) != len(keys):
        return None
    return items


def as_int(value: Any) -> int | None:
    """``value`` as an int if it is one exactly (int, numpy integer, integral float, numeric
    string), else None. Booleans are not integers here."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        text = value.strip().replace("_", "")
        try:
            return int(text)
        except ValueError:
            value = as_float(text)
            if value is None:
                return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        f = float(value)
        if math.isfinite(f) and f.is_integer():
            return int(f)
    return None


def as_float(value: Any) -> float | None:
    """``value`` as a finite float (real numbers and numeric strings), else None: NaN and
    infinities are refused here, once for every field."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if not isinstance(value, numbers.Real):
        return None
    try:
        f = float(value)
    except (OverflowError, ValueError, TypeError):
        return None
    return f if math.isfinite(f) else None
