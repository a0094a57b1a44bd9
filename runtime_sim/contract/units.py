"""Times and byte counts as a person reads them: the one definition every command prints with.

``tvm-icca run`` said "9.695 us" and ``tvm-icca simulate`` "0.0097 ms" for the same run, and
byte counts read "79391.468 MB". Here a time takes the largest of ns, us, ms and s in which it
is at least 1 (:func:`time_unit`), and a byte count the largest of B, KiB, MiB, GiB and TiB
(powers of 1024, as SRAM and HBM capacities are given) in which it is at least 1, each with
four significant figures. A table whose rows must line up picks one unit for all of them from
its largest value (:func:`time_unit` of it, then :func:`in_unit`).

Machine-readable output (``--json``, ``to_dict()``, result files) keeps plain seconds and
bytes; these functions are for text a person reads.
"""

from __future__ import annotations

import math

__all__ = ["TIME_UNITS", "BYTE_UNITS", "SI_PREFIXES", "time_unit", "in_unit", "format_seconds",
           "format_bytes", "byte_unit", "si_unit"]

#: Time units, largest first, with their length in seconds.
TIME_UNITS: tuple[tuple[str, float], ...] = (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))

#: Byte units (IEC binary prefixes), largest first, with their size in bytes.
BYTE_UNITS: tuple[tuple[str, int], ...] = (
    ("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1))

#: SI prefixes (BIPM, The International System of Units, 9th ed. 2019, Table 7), largest
#: first, with their factor: bandwidths (decimal, as datasheets give them: 16 TB/s), energies,
#: powers, rates.
SI_PREFIXES: tuple[tuple[str, float], ...] = (
    ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0), ("m", 1e-3), ("u", 1e-6),
    ("n", 1e-9), ("p", 1e-12))


def time_unit(seconds: float) -> tuple[str, float]:
    """The unit ``seconds`` reads best in: the largest in which it is at least 1 (ns for
    anything smaller, 0 included), as ``(name, seconds per unit)``."""
    magnitude = abs(seconds) if math.isfinite(seconds) else 0.0
    for name, scale in TIME_UNITS:
        if magnitude >= scale:
            return name, scale
    return TIME_UNITS[-1]


def si_unit(value: float, unit: str) -> tuple[str, float]:
    """The SI-prefixed ``unit`` that ``value`` reads best in: the largest prefix in which it
    is at least 1 (the smallest, pico, for anything smaller, 0 included), as ``(name, value of
    one such unit)``: ``si_unit(1.6e13, "B/s") == ("TB/s", 1e12)``, ``si_unit(0.004, "J") ==
    ("mJ", 1e-3)``. A table or an axis picks one from its largest value."""
    magnitude = abs(value) if math.isfinite(value) else 0.0
    for prefix, scale in SI_PREFIXES:
        if magnitude >= scale:
            return prefix + unit, scale
    prefix, scale = SI_PREFIXES[-1]
    return prefix + unit, scale


def byte_unit(count: float) -> tuple[str, int]:
    """The binary unit (:data:`BYTE_UNITS`) a byte count reads best in, as ``(name, bytes per
    unit)``: the largest in which it is at least 1 (B for anything smaller)."""
    magnitude = abs(count) if math.isfinite(count) else 0.0
    for name, size in BYTE_UNITS:
        if magnitude >= size:
            return name, size
    return BYTE_UNITS[-1]


def in_unit(seconds: float, unit: tuple[str, float], width: int = 0, decimals: int = 3) -> str:
    """``seconds`` as a number in ``unit`` (from :func:`time_unit`), right-aligned in
    ``width``, without the unit's name: one column of a table."""
    return f"{seconds / unit[1]:>{width}.{decimals}f}"


def format_seconds(seconds: float | None) -> str:
    """``10.92 us``, ``3.5 ms``, ``184 ns``, ``2.4 s``: four significant figures in the unit of
    :func:`time_unit` (``n/a`` for ``None``, nan or inf)."""
    if seconds is None or not math.isfinite(seconds):
        return "n/a"
    name, scale = time_unit(seconds)
    return f"{_significant(seconds / scale)} {name}"


def format_bytes(count: float | None) -> str:
    """``0 B``, ``999 B``, ``20 KiB``, ``1.144 MiB``, ``73.94 GiB``: four significant figures in
    the largest binary unit in which the count is at least 1 (``n/a`` for ``None``)."""
    if count is None or not math.isfinite(count):
        return "n/a"
    name, size = byte_unit(count)
    if size == 1:
        return f"{int(round(count))} B"
    return f"{_significant(count / size)} {name}"


def _significant(value: float) -> str:
    """Four significant figures, no exponent, no trailing zeros (a value below 10,000)."""
    text = f"{value:.4g}"
    if "e" in text:  # 9999.6 rounds to 1e+04: print it whole
        text = f"{value:.0f}"
    return text
