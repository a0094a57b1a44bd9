"""runtime_sim.contract.units: one time unit choice and adaptive byte units for every command."""

from __future__ import annotations

import math

import pytest

from runtime_sim.contract.units import format_bytes, format_seconds, in_unit, time_unit


@pytest.mark.parametrize("seconds, text", [
    (0.0, "0 ns"), (184e-9, "184 ns"), (9.695e-6, "9.695 us"), (10.917e-6, "10.92 us"),
    (1e-3, "1 ms"), (0.0123456, "12.35 ms"), (2.5, "2.5 s"), (3600.0, "3600 s"),
    (999.96e-6, "1000 us"), (None, "n/a"), (math.nan, "n/a"),
])
def test_format_seconds_picks_the_largest_unit_with_a_value_of_at_least_one(seconds, text):
    assert format_seconds(seconds) == text


@pytest.mark.parametrize("count, text", [
    (0, "0 B"), (999, "999 B"), (1023, "1023 B"), (1024, "1 KiB"), (20_480, "20 KiB"),
    (1_200_000, "1.144 MiB"), (79.39e9, "73.94 GiB"), (16e12, "14.55 TiB"), (None, "n/a"),
])
def test_format_bytes_uses_binary_units(count, text):
    assert format_bytes(count) == text


def test_every_value_reads_back_within_its_rounding():
    # against the plain arithmetic: the printed number times its unit is the value
    scales = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    for exponent in range(-10, 4):
        for mantissa in (1.0, 2.345, 9.999):
            seconds = mantissa * 10.0 ** exponent
            number, unit = format_seconds(seconds).split()
            assert float(number) * scales[unit] == pytest.approx(seconds, rel=1e-3)
            assert 1 <= float(number) < 1000 or unit == "ns" or unit == "s"


def test_a_table_column_shares_the_unit_of_its_largest_value():
    unit = time_unit(0.0123)
    assert unit == ("ms", 1e-3)
    assert in_unit(0.0123, unit, 8) == "  12.300"
    assert in_unit(4e-6, unit, 8) == "   0.004"


def test_si_and_byte_units():
    from runtime_sim.contract.units import byte_unit, si_unit

    assert si_unit(1.6e13, "B/s") == ("TB/s", 1e12)
    assert si_unit(5.5e9, "B/s") == ("GB/s", 1e9)
    assert si_unit(999.0, "W") == ("W", 1.0)
    assert si_unit(-0.004, "J") == ("mJ", 1e-3)
    assert si_unit(0.0, "J") == ("pJ", 1e-12) and si_unit(float("nan"), "J") == ("pJ", 1e-12)
    assert byte_unit(624 * 1024 * 5888) == ("GiB", 1 << 30)
    assert byte_unit(1023) == ("B", 1) and byte_unit(1024) == ("KiB", 1024)
