"""The SRAM rule of a core (runtime_sim.contract.sram_budget): the compiler's budgets and the
device's check are one rule, here against closed-form figures."""

from __future__ import annotations

import numpy as np
import pytest

from runtime_sim.contract.errors import SramOverflowError
from runtime_sim.contract.presets import small_chip
from runtime_sim.contract.sram_budget import check_sram, separate_preload_sram, sram_budget

HW = small_chip(4, 20 * 1024, shift_buffer_bytes=512)
SRAM = 20 * 1024


def test_budgets_are_the_device_rule_less_the_shift_buffer():
    for design in (None, "basic", "static", "elk-dyn", "elk-full"):
        b = sram_budget(HW, design)
        assert not b.separate and not separate_preload_sram(design)
        assert b.execution_bytes == b.preload_bytes == SRAM - 512
    ideal = sram_budget(HW, "ideal")
    # Elk §6.1: a full-sized preload SRAM of its own, which holds no shift buffer
    assert ideal.separate and (ideal.execution_bytes, ideal.preload_bytes) == (SRAM - 512, SRAM)


@pytest.mark.parametrize("design", ["elk-full", "ideal"])
def test_compiler_budget_full_is_exactly_what_the_device_admits(design):
    """A window filled to the compiler's budget passes the device's check; one byte more on
    one core is refused on that core."""
    b = sram_budget(HW, design)
    shift = HW.shift_buffer_bytes
    if b.separate:
        execution = np.full(4, b.execution_bytes + shift)
        preload = np.full(4, b.preload_bytes)
    else:
        execution = np.full(4, b.execution_bytes // 2 + shift)
        preload = np.full(4, b.execution_bytes - b.execution_bytes // 2)
    assert check_sram("op", HW, execution, preload, separate=b.separate) == SRAM
    for side in (execution, preload):
        side[2] += 1
        with pytest.raises(SramOverflowError) as err:
            check_sram("op", HW, execution, preload, separate=b.separate, label="matmul")
        assert (err.value.core, err.value.needed_bytes, err.value.budget_bytes) == (2, SRAM + 1, SRAM)
        assert "matmul" in str(err.value)
        side[2] -= 1


def test_shared_sram_sums_the_sides_and_ideal_does_not():
    execution = np.array([SRAM // 2 + 1, 0, 0, 0])
    preload = np.array([SRAM // 2, 0, 0, 0])
    with pytest.raises(SramOverflowError):
        check_sram("op", HW, execution, preload)
    assert check_sram("op", HW, execution, preload, separate=True) == SRAM // 2 + 1
    assert check_sram("op", HW, execution) == SRAM // 2 + 1
