"""Candidate scans on worker processes (tvm_icca.plans.option_pool): the same candidates as in
process, whatever the number of workers."""

from __future__ import annotations

import pytest

from runtime_sim.hardware import small_chip
from tvm_icca.plans.option_pool import available_jobs, options_of_many
from tvm_icca.plans.reconcile import operator_options
from tvm_icca.programs import compile_programs
from tvm_icca.region import PlanCache
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
    one = compile_programs(workload, chip, state_on_chip=True, plan_cache=PlanCache(jobs=1))
    two = compile_programs(workload, chip, state_on_chip=True, plan_cache=PlanCache(jobs=2))
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
