"""Candidate scans on worker processes (tvm_icca.plan_search.option_pool): the same candidates as in
process, whatever the number of workers."""

from __future__ import annotations

import pytest

from runtime_sim.contract.presets import small_chip
from tvm_icca.drivers.device_programs import compile_programs
from tvm_icca.model_pass.plan_cache import PlanCache
from tvm_icca.plan_search.option_pool import available_jobs, map_in_workers, options_of_many
from tvm_icca.plan_search.reconcile import operator_options
from tvm_icca.testing import exprs
from tvm_icca.workloads import get_workload

CHIP = small_chip(16, 24 * 1024)


def test_workers_return_what_the_process_computes():
    requests = [(exprs.matmul(16, 64, 48), (1,)), (exprs.matmul(16, 48, 64), (1,)),
                (exprs.matmul(16, 64, 32), ()), (exprs.matmul(8, 32, 96), (0, 1))]
    pooled = options_of_many(requests, CHIP, jobs=2)
    alone = [operator_options(e, CHIP, list(r), CHIP.usable_sram_bytes) for e, r in requests]
    assert pooled == alone
    assert options_of_many(requests, CHIP, jobs=1) == alone
    assert options_of_many([], CHIP, jobs=2) == []
    assert available_jobs() >= 1


def test_a_model_kept_on_chip_plans_the_same_with_and_without_workers():
    workload = get_workload("bert-large", tiny=True)
    chip = small_chip(64, 48 * 1024)
    one = compile_programs(workload, chip, state="chip", plan_cache=PlanCache(jobs=1))
    two = compile_programs(workload, chip, state="chip", plan_cache=PlanCache(jobs=2))
    assert [p.to_json() for p in one.programs] == [p.to_json() for p in two.programs]


def test_a_scan_that_fails_in_a_worker_raises_as_in_process():
    bad = (exprs.matmul(16, 64, 48), (7,))  # no input 7: the scan itself fails
    requests = [(exprs.matmul(16, 64, 32), ()), bad, (exprs.matmul(8, 32, 96), (0, 1))]
    try:
        operator_options(bad[0], CHIP, list(bad[1]), CHIP.usable_sram_bytes)
    except Exception as error:  # pylint: disable=broad-except
        expected = type(error)
    else:
        raise AssertionError("the bad request should fail in process too")
    with pytest.raises(expected):
        options_of_many(requests, CHIP, jobs=2)


def _square_or_fail(x: int) -> int:
    if x < 0:
        raise ValueError("negative")
    return x * x


def test_map_in_workers_keeps_order_and_leaves_failures_to_the_caller():
    assert map_in_workers(_square_or_fail, [3, -1, 4, 5], jobs=2) == [9, None, 16, 25]
    assert map_in_workers(_square_or_fail, [3, 4], jobs=1) == [None, None]  # in process: caller's


def test_ladders_prefetched_on_workers_plan_as_asked_one_by_one():
    # the budgets of two ladders of one structure interleave; the smallest has no plan
    from runtime_sim.contract.errors import PlanNotFoundError

    expr = exprs.matmul(16, 64, 48)
    fast = PlanCache(jobs=1).plan(expr, CHIP, None, CHIP.usable_sram_bytes, "mm").memory_bytes_per_core
    ladders = [[(expr, int(fast * f), "mm", (), None) for f in (0.7, 0.4, 0.05)],
               [(expr, int(fast * f), "mm", (), None) for f in (0.6, 0.3, 0.02)]]
    prefetched = PlanCache(jobs=2)
    prefetched.prefetch_ladders(ladders, CHIP)
    alone = PlanCache(jobs=1)
    failed = 0
    for ladder in ladders:
        for expr_, budget, name, hbm, _ in ladder:
            try:
                want = alone.plan(expr_, CHIP, None, budget, name, hbm)
            except PlanNotFoundError:
                with pytest.raises(PlanNotFoundError):
                    prefetched.plan(expr_, CHIP, None, budget, name, hbm)
                failed += 1
                break
            misses = prefetched.misses
            assert prefetched.plan(expr_, CHIP, None, budget, name, hbm).plan == want.plan
            assert prefetched.misses == misses  # every rung with a plan was prefetched
    assert failed == 2
