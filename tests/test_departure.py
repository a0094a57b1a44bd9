"""Departure pricing in the plan search (tvm_icca.plan_search.departure): a producer's plan
searched with its readers' arrivals, exactly."""

from __future__ import annotations

import numpy as np
import pytest

from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.presets import small_chip
from tvm_icca.plan_search import plan_operator
from tvm_icca.plan_search.batch_cost import AnalyticBatchModel, InPlace
from tvm_icca.plan_search.departure import (
    DepartureCostModel,
    leaves_in_place,
    plan_departing,
    reader_departure,
)
from tvm_icca.plan_search.plan_space import PlanBatch
from tvm_icca.plan_search.search import scan
from tvm_icca.plan_search.search_memo import plan_structure
from tvm_icca.testing import exprs

CHIP = small_chip(16, 64 * 1024)


def _reader(M: int, N: int) -> OpLayout:
    """A softmax over rows of ``[M, N]``, its rows split over the cores (its own best plan:
    a row's reduction stays on one core)."""
    planned = plan_operator(exprs.softmax(M, N), CHIP, arriving=(0,))
    assert planned.plan.op_partition == {"i": CHIP.num_cores, "j": 1}
    return planned.layout


def test_a_reader_names_the_blocks_it_reads_and_what_their_absence_costs():
    reader = _reader(256, 256)
    producer = exprs.bias_add(256, 256)
    d = reader_departure(reader, 0, producer, CHIP)
    assert d is not None
    # 16 row blocks of 16 rows, whole columns, on the producer's output (its third tensor)
    assert d.blocks == InPlace(2, (16, 256), (16, 1), (0, 1))
    # the reader's arrival: one partition of 16 x 256 float32 over its link
    assert d.seconds == pytest.approx(16 * 256 * 4 / CHIP.link_bandwidth)


def test_a_replicating_reader_names_no_departure():
    """A matmul that splits the columns of its weight replicates its activation over them:
    no producer plan leaves one block per core where every replica finds it."""
    expr = exprs.matmul(64, 64, 64)
    layout = OpLayout(expr, ExecutionPlan({"m": 4, "k": 1, "n": 4}, ({}, {}, {}), ()))
    assert reader_departure(layout, 0, exprs.bias_add(64, 64), CHIP) is None


def test_the_departing_search_is_the_exact_minimum_of_own_time_plus_unmet_departures():
    """Against every plan of the complete space scored with the same model (brute force)."""
    reader = _reader(64, 256)
    for producer, aligns in ((exprs.bias_add(64, 256), True), (exprs.matmul(64, 64, 256), False)):
        d = reader_departure(reader, 0, producer, CHIP)
        budget = CHIP.usable_sram_bytes
        planned = plan_departing(producer, CHIP, (d,), budget)
        structure = plan_structure(producer)
        model = DepartureCostModel(AnalyticBatchModel(CHIP), (d,))
        brute = min(float(s.time.min()) for s in scan(structure, model, CHIP.num_cores, None, budget)
                    if len(s))
        chosen = float(model.times(PlanBatch.of_plan(structure, planned.plan))[0][0])
        assert chosen == pytest.approx(brute, rel=1e-9)
        # the elementwise producer leaves the reader's rows; the matmul cannot (a whole
        # 64 x 256 float32 weight per core, which rows alone would need, exceeds the budget)
        assert leaves_in_place(planned.layout, d) == aligns


def test_bounds_never_exceed_a_plan_of_their_row():
    reader = _reader(64, 256)
    producer = exprs.matmul(64, 64, 256)
    d = reader_departure(reader, 0, producer, CHIP)
    structure = plan_structure(producer)
    model = DepartureCostModel(AnalyticBatchModel(CHIP), (d,))
    for scored in scan(structure, model, CHIP.num_cores, None, CHIP.usable_sram_bytes):
        batch = scored.batch
        if not len(batch):
            continue
        assert np.all(model.time_lower_bound(structure, batch.F) <= scored.time * (1 + 1e-9))
        assert np.all(model.step_lower_bound(structure, batch.F, batch.S, batch.xp)
                      <= scored.time * (1 + 1e-9))


def test_a_departure_changes_a_tied_producer_and_nothing_else():
    """An elementwise producer is indifferent between splitting rows and columns; with a
    departure it leaves rows, as its reader reads them, at no cost of its own."""
    producer = exprs.bias_add(256, 256)
    alone = plan_operator(producer, CHIP)
    d = reader_departure(_reader(256, 256), 0, producer, CHIP)
    departing = plan_departing(producer, CHIP, (d,), CHIP.usable_sram_bytes)
    assert not leaves_in_place(alone.layout, d)  # its first choice forces a re-layout
    assert leaves_in_place(departing.layout, d)
    assert departing.time_s == pytest.approx(alone.time_s)
    # without departures, the same search as plan_operator
    assert plan_departing(producer, CHIP, (), CHIP.usable_sram_bytes).plan == alone.plan
