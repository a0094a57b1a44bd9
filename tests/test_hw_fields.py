"""The hardware fields each plan depends on (tvm_icca.plan_search.hw_fields) are all it reads.

Two checks per computation (the plan search, the candidate placements and their bytes, the
choice among them, the idle/active options): it gives identical results on chips whose
undeclared fields differ, and a chip that records every field read sees none outside the
declaration. Either fails when a cost term starts reading a field the plan cache's keys
leave out (which would make the cache answer with a plan for another chip).
"""

from __future__ import annotations

import dataclasses
import sys

import pytest

from runtime_sim.contract.hardware import KIB, HardwareSpec
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.presets import small_chip
from tvm_icca.plan_search import SearchMemo
from tvm_icca.plan_search import search as search_module
from tvm_icca.plan_search.hw_fields import (
    PLACEMENT_FIELDS,
    SEARCH_FIELDS,
    placement_key,
    placement_rates,
    plan_key,
    search_key,
)
from tvm_icca.plan_search.mapping import pick_placement, placement_bytes
from tvm_icca.plan_search.reconcile import operator_options

FIELDS = tuple(f.name for f in dataclasses.fields(HardwareSpec))
RATE_FIELDS = ("inter_chip_bandwidth", "hbm_bandwidth")

#: Two chips with HBM; every latency and rate nonzero, so that each can matter.
CHIP = small_chip(64, 256 * KIB, num_chips=2, hbm_bandwidth=1e11, hbm_controllers=2,
                  inter_chip_bandwidth=50e9, link_latency_s=5e-8, inter_chip_latency_s=1e-6,
                  sync_cycles=150)

#: Chips differing from CHIP in fields outside SEARCH_FIELDS (each group a valid chip).
OTHER_THAN_SEARCH = [
    dict(hbm_bandwidth=3e12, hbm_controllers=4, host_bandwidth=1e9, hbm_injection_bandwidth=7e9),
    dict(topology="mesh", mesh_rows=4, mesh_cols=8, mesh_torus=True),
    dict(name="another", notes="poisoned", assumed={"sync_cycles": "poisoned"}),
    dict(inter_chip_bandwidth=1e9),
    dict(hbm_bandwidth=0.0, hbm_controllers=0),
]
#: ... and in the fields the search reads but the placements' bytes do not.
OTHER_THAN_PLACEMENT = OTHER_THAN_SEARCH + [
    dict(link_bandwidth=1e9, link_latency_s=1e-6, inter_chip_latency_s=3e-6, sync_cycles=9),
    dict(clock_hz=1e9, matrix_flops_per_cycle=64.0, vector_flops_per_cycle=2.0, matrix_tile=(8, 8, 8)),
    dict(matrix_flops_per_cycle_by_dtype={"float16": 32.0, "float32": 8.0}),
    dict(sram_bytes_per_core=512 * KIB, shift_buffer_bytes=4 * KIB),
]


def _cases(exprs):
    """(expr, budget, hbm inputs, producers): a k-split matmul with its weight in HBM, a
    softmax (split statistics) fed by a producer spread over the chips, a bias add."""
    mm = exprs.matmul(32, 512, 512, "float16")
    prod = OpLayout(exprs.bias_add(16, 64), ExecutionPlan({"i": 16}, ({}, {}, {})), CHIP.cores_per_chip)
    return [
        (mm, 64 * KIB, (1,), ()),
        (mm, 12 * KIB, (), ()),
        (exprs.softmax(16, 64), 4 * KIB, (), ((0, prod),)),
        (exprs.bias_add(64, 256), 4 * KIB, (0,), ()),
    ]


class _Recording(HardwareSpec):
    """A chip that records the fields read of it (not by ==, hash or repr, which read them all)."""

    reads: set[str] = set()

    def __getattribute__(self, name: str):
        if name in FIELDS:
            code = sys._getframe(1).f_code  # pylint: disable=protected-access
            if code.co_name not in ("__eq__", "__ne__", "__hash__", "__repr__"):
                _Recording.reads.add(name)
        return object.__getattribute__(self, name)

    __hash__ = HardwareSpec.__hash__


def _recording(hw: HardwareSpec) -> _Recording:
    return _Recording(**{name: getattr(hw, name) for name in FIELDS})


def _reads(fn) -> set[str]:
    hw = _recording(CHIP)  # (validating it reads every field)
    _Recording.reads = set()
    fn(hw)
    return set(_Recording.reads)


def _search(expr, hw, budget):
    planned = search_module._search(expr, hw, None, budget, "op", SearchMemo(), True)  # pylint: disable=protected-access
    return planned.plan, planned.cost


def test_declared_fields_are_fields():
    assert set(SEARCH_FIELDS) <= set(FIELDS) and set(PLACEMENT_FIELDS) <= set(FIELDS)
    assert "hbm_bandwidth" not in SEARCH_FIELDS and "topology" not in SEARCH_FIELDS
    assert dict(search_key(CHIP))["link_bandwidth"] == CHIP.link_bandwidth
    assert dict(placement_rates(CHIP, (1,))).keys() == {"inter_chip_bandwidth", "hbm_bandwidth"}
    assert dict(placement_rates(CHIP, ())).keys() == {"inter_chip_bandwidth"}
    assert placement_rates(small_chip(16), (0,)) == ()
    # only what the plan reads: a chip differing in HBM bandwidth has the same key for an
    # operator without HBM inputs, another for one with
    faster = CHIP.with_overrides(hbm_bandwidth=4e11)
    assert plan_key(faster, ()) == plan_key(CHIP, ())
    assert plan_key(faster, (1,)) != plan_key(CHIP, (1,))
    assert placement_key(faster) == placement_key(CHIP)


def test_search_reads_only_search_fields(exprs):
    for expr, budget, _, _ in _cases(exprs):
        read = _reads(lambda hw: _search(expr, hw, budget))
        assert read <= set(SEARCH_FIELDS), read - set(SEARCH_FIELDS)
        assert {"link_bandwidth", "num_cores", "clock_hz"} <= read  # the recorder works
        if expr.kind == "matmul":  # a matrix sub-task reads the rate of its dtype
            assert "matrix_flops_per_cycle_by_dtype" in read


def test_failed_search_reads_search_fields_and_the_name(exprs):
    """A search that proves nothing fits names the chip in its message: the plan cache keys
    the failure on the search's fields and puts the asking chip's name in (test_plan_store)."""
    from runtime_sim.contract.errors import PlanNotFoundError

    def fail(hw):
        with pytest.raises(PlanNotFoundError, match="icca-64"):
            _search(exprs.matmul(32, 512, 512, "float16"), hw, 8 * KIB)

    read = _reads(fail)
    assert read <= set(SEARCH_FIELDS) | {"name"}, read - set(SEARCH_FIELDS)


@pytest.mark.parametrize("change", OTHER_THAN_SEARCH)
def test_search_ignores_other_fields(exprs, change):
    other = CHIP.with_overrides(**change)
    assert search_key(other) == search_key(CHIP)
    for expr, budget, _, _ in _cases(exprs):
        assert _search(expr, other, budget) == _search(expr, CHIP, budget)


def test_placements_read_only_placement_fields(exprs):
    for expr, budget, hbm, producers in _cases(exprs):
        plan = _search(expr, CHIP, budget)[0]
        read = _reads(lambda hw: placement_bytes(expr, plan, hw, hbm, producers))
        assert read <= set(PLACEMENT_FIELDS), read - set(PLACEMENT_FIELDS)
        options = placement_bytes(expr, plan, CHIP, hbm, producers)
        read = _reads(lambda hw: pick_placement(plan, options, hw, hbm))
        allowed = {"num_chips"} | {name for name, _ in placement_rates(CHIP, hbm)}
        assert read <= allowed, read - allowed


@pytest.mark.parametrize("change", OTHER_THAN_PLACEMENT)
def test_placements_ignore_other_fields(exprs, change):
    other = CHIP.with_overrides(**change)
    for expr, budget, hbm, producers in _cases(exprs):
        plan = _search(expr, CHIP, budget)[0]
        options = placement_bytes(expr, plan, CHIP, hbm, producers)
        assert placement_bytes(expr, plan, other, hbm, producers) == options
        rates = {k: v for k, v in change.items() if k in RATE_FIELDS}
        if not rates or not dict(placement_rates(CHIP, hbm)).keys() & rates.keys():
            assert pick_placement(plan, options, other, hbm) == pick_placement(plan, options, CHIP, hbm)


def test_options_read_only_search_fields(exprs):
    expr = exprs.matmul(32, 512, 512, "float16")
    read = _reads(lambda hw: operator_options(expr, hw, [1], 64 * KIB, cache=SearchMemo()))
    assert read <= set(SEARCH_FIELDS), read - set(SEARCH_FIELDS)
    other = CHIP.with_overrides(**OTHER_THAN_SEARCH[0], **OTHER_THAN_SEARCH[1])
    assert (operator_options(expr, other, [1], 64 * KIB, cache=SearchMemo())
            == operator_options(expr, CHIP, [1], 64 * KIB, cache=SearchMemo()))
