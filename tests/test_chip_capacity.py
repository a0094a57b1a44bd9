"""tvm_icca.plan_search.chip_capacity: a tensor larger than the whole chip, and the budget's words."""

import pytest

from runtime_sim.contract.errors import PlanNotFoundError
from runtime_sim.contract.presets import small_chip
from tvm_icca.plan_search.chip_capacity import budget_note, check_fits_chip


def test_a_tensor_one_byte_over_the_chip_is_refused_and_one_that_fits_is_not(exprs):
    expr = exprs.matmul(64, 64, 64, "float32")  # every tensor 16 KiB
    hw = small_chip(4, 64 * 1024)
    check_fits_chip(expr, hw, 4096, "mm")  # 4 cores x 4096 bytes: exactly 16 KiB
    with pytest.raises(PlanNotFoundError, match=r"exceeds the on-chip memory.*4 cores x 4095 bytes"):
        check_fits_chip(expr, hw, 4095, "mm")


def test_budget_note_names_what_else_the_sram_holds():
    hw = small_chip(4, 64 * 1024)
    assert budget_note(hw, hw.sram_bytes_per_core) == ""
    note = budget_note(hw, hw.usable_sram_bytes - 1000)
    assert f"{hw.shift_buffer_bytes}-byte shift buffer" in note
    assert "1000 more bytes are outside this operator's budget" in note
    assert "more bytes" not in budget_note(hw, hw.usable_sram_bytes)
