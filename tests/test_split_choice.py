"""Which operators are split, along which axis, into how many pieces
(tvm_icca.split.split_choice)."""

from __future__ import annotations

from runtime_sim.contract.presets import small_chip
from tvm_icca.plan_search import plan_operator
from tvm_icca.split.split_choice import (
    OVERLAP_SHARE,
    _candidates,
    best_split,
    needs_split,
    spread_bytes_per_core,
    split_axes,
)
from tvm_icca.testing import exprs

CHIP = small_chip(16, 32 * 1024)


def _plan_time(expr, budget, name):
    return plan_operator(expr, CHIP, budget_bytes=budget, name=name).time_s


def test_an_operator_that_cannot_fit_needs_a_split():
    small, big = exprs.matmul(16, 16, 16), exprs.matmul(256, 256, 128)
    assert not needs_split(small, CHIP) and not needs_split(small, CHIP, preloaded=True)
    assert spread_bytes_per_core(big, CHIP.num_cores) > CHIP.usable_sram_bytes
    assert needs_split(big, CHIP)


def test_a_preloaded_operator_filling_half_the_sram_is_split():
    expr = exprs.matmul(160, 128, 128)
    share = spread_bytes_per_core(expr, CHIP.num_cores) / CHIP.usable_sram_bytes
    assert OVERLAP_SHARE < share < 1
    assert needs_split(expr, CHIP, preloaded=True) and not needs_split(expr, CHIP)


def test_the_split_cuts_the_largest_tensor():
    expr = exprs.matmul(8, 512, 512)  # B [512, 512] is the largest: cut along k or n, not m
    assert set(split_axes(expr)) == {"k", "n"}


def test_repeated_off_chip_reads_steer_the_choice():
    """Cutting along m re-reads all of B per piece, along n all of A: whichever input is off
    the chip, the choice cuts it rather than re-reading it."""
    expr = exprs.matmul(256, 64, 256)
    free = best_split(expr, CHIP, _plan_time, "mm", 0)
    b_offchip = best_split(expr, CHIP, _plan_time, "mm", 0, offchip={1: 1e9})
    a_offchip = best_split(expr, CHIP, _plan_time, "mm", 0, offchip={0: 1e9})
    assert b_offchip.axis != "m" and a_offchip.axis != "n"
    assert min(b_offchip.estimated_time_s, a_offchip.estimated_time_s) >= free.estimated_time_s


def test_piece_counts_divide_the_extent():
    assert list(_candidates(32768, 3)) == [4, 8, 16]
    assert list(_candidates(40, 3)) == [4, 8, 20]
    assert list(_candidates(7, 3)) == [7]
    assert list(_candidates(4, 5)) == []


def test_an_epilogue_input_is_read_once_when_the_cut_runs_along_the_reduction():
    """A cut along k leaves the bias to the combine: the pieces do not read it, so an
    off-chip bias adds no repeated read (and pricing it must not look for it among the
    pieces' inputs, which are renumbered without it)."""
    expr = exprs.matmul_bias_relu(64, 512, 64)  # B [512, 64] is the largest: cut along k
    free = best_split(expr, CHIP, _plan_time, "mm", 0)
    bias_offchip = best_split(expr, CHIP, _plan_time, "mm", 0, offchip={2: 1e9})
    assert free.axis == bias_offchip.axis == "k"
    assert bias_offchip.estimated_time_s == free.estimated_time_s
    b_offchip = best_split(expr, CHIP, _plan_time, "mm", 0, offchip={1: 1e9})
    assert b_offchip.estimated_time_s > free.estimated_time_s
