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
from typing import Any, Mapping, Sequence

from runtime_sim.contract.errors import InvalidHardwareSpecError


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


def field_error(kind: str, spec_name: Any, field: str, value: Any, why: str
                ) -> InvalidHardwareSpecError:
    """The one-paragraph error of an impossible field of a ``kind`` (``HardwareSpec``,
    ``GpuSpec``) named ``spec_name``: the field, its value (cut to 40 characters: a huge list
    must not flood the message) and why it is impossible."""
    # repr: a name with a newline must not break the one-paragraph message
    name = repr(spec_name[:40]) if isinstance(spec_name, str) else "'?'"
    shown = repr(value)
    if len(shown) > 40:
        shown = shown[:30] + "..." + shown[-6:]
    return InvalidHardwareSpecError(f"invalid {kind} {name}: {field}={shown} {why}")


def assumed_marks(value: Any, markable: Sequence[str]) -> tuple[tuple[str, str], ...] | None:
    """The ``assumed`` marks of a spec (field -> why its value is assumed) in ``markable``'s
    order, each reason stripped; None unless every mark names a field of ``markable`` with a
    non-empty reason."""
    marks = as_pairs(value)
    if marks is None or any(name not in markable or not isinstance(why, str) or not why.strip()
                            for name, why in marks):
        return None
    marked = dict(marks)
    return tuple((name, marked[name].strip()) for name in markable if name in marked)
