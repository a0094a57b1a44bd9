"""Elk trade-off tables (tvm_icca.model.preload_tables): the arrival of on-chip inputs."""

from __future__ import annotations

import pytest

from runtime_sim.hardware import small_chip
from runtime_sim.layout import OpLayout, canonical_grid, producer_grid
from runtime_sim.program import ExecutionPlan
from tvm_icca.model.preload_tables import arrival_seconds
from tvm_icca.testing import exprs

CHIP = small_chip(4, 64 * 1024)


def test_arrival_of_a_row_split_input_replicated_on_every_core():
    # the producer leaves C [8, 16] float32 split by rows over 4 cores (128 B each); the
    # consumer splits its own output columns, so every core needs all of A = C: 512 B, of
    # which it already holds the producer's 128 B -> 384 B over its link
    producer = OpLayout(exprs.matmul(8, 4, 16), ExecutionPlan({"m": 4}, ({}, {}, {})))
    consumer = OpLayout(exprs.matmul(8, 16, 4), ExecutionPlan({"n": 4}, ({}, {}, {})))
    got = arrival_seconds(consumer, [(0, producer_grid(producer))], CHIP)
    assert got == pytest.approx(384 / CHIP.link_bandwidth)


def test_arrival_is_free_where_the_producer_left_the_data():
    producer = OpLayout(exprs.matmul(8, 4, 16), ExecutionPlan({"m": 4}, ({}, {}, {})))
    consumer = OpLayout(exprs.matmul(8, 16, 4), ExecutionPlan({"m": 4}, ({}, {}, {})))
    assert arrival_seconds(consumer, [(0, producer_grid(producer))], CHIP) == 0.0
    assert arrival_seconds(consumer, [], CHIP) == 0.0


def test_arrival_of_a_region_input_from_its_canonical_blocks():
    consumer = OpLayout(exprs.matmul(8, 16, 4), ExecutionPlan({"n": 4}, ({}, {}, {})))
    grid = canonical_grid((8, 16), 4, CHIP.num_cores)
    # each core needs the whole 128-float input and holds one canonical block of it
    held = int(grid.block[0] * grid.block[1]) * 4
    got = arrival_seconds(consumer, [(0, grid)], CHIP)
    assert got == pytest.approx((512 - held) / CHIP.link_bandwidth)
