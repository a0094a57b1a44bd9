"""The Elk pass of the model planner (tvm_icca.model_pass.elk_pass): every design's schedule is a
valid stream, runs exactly on the functional device, and both executors agree on what moved."""

from __future__ import annotations

import dataclasses

import pytest

from runtime_sim.contract.errors import IccaError
from runtime_sim.contract.presets import preset, small_chip
from runtime_sim.contract.stream import offchip_inputs, run_stream
from tvm_icca.drivers.device_programs import compile_programs
from tvm_icca.model_pass import PRELOAD_DESIGNS
from tvm_icca.model_pass.elk_pass import schedule_preloads
from tvm_icca.model_pass.plan_cache import PlanCache
from tvm_icca.testing.device_runs import run_against_llvm
from tvm_icca.workloads import get_workload

# one worker builds the module's shared fixtures once (make test runs on several), with the
# session's plan_cache that tests/test_period_reuse.py plans the same chip's Llama layers with
pytestmark = pytest.mark.xdist_group("hbm64_llama")

HBM_CHIP = small_chip(64, 64 * 1024).with_overrides(name="hbm-64", hbm_bandwidth=1e12,
                                                    hbm_controllers=2)


def _tiny_llama():
    return get_workload("llama2-13b", tiny=True, batch=2, context=8)


@pytest.fixture(scope="module")
def cache(plan_cache):
    """The plan cache of the module's compiles: the session's (a cache answers what a search
    would: tests/test_device_programs.py, test_public_plan_cache_shared_by_preload_designs)."""
    return plan_cache


@pytest.fixture(scope="module")
def designs(cache):
    """The tiny Llama's programs under every design."""
    mod = _tiny_llama().mod
    return {d: compile_programs(mod, HBM_CHIP, plan_cache=cache, preload=d) for d in PRELOAD_DESIGNS}


@pytest.mark.parametrize("design", PRELOAD_DESIGNS)
def test_every_design_is_a_valid_stream(designs, design):
    model = designs[design]
    assert model.preload is not None and model.preload.design == design
    stream = run_stream(model.programs, True)  # raises on any broken rule
    needs = {(c, j) for c, p in enumerate(model.programs)
             for j, ins in enumerate(offchip_inputs(p, True)) if ins}
    assert {(i.call, i.op) for i in stream if i.kind == "preload"} == needs
    assert sum(i.kind == "execute" for i in stream) == model.num_device_ops
    report = model.simulate()
    assert report.design == design
    assert report.preloads == len(needs)
    # no design beats the HBM floor (distinct bytes over the HBM bandwidth)
    assert report.total_s >= report.hbm_bytes / HBM_CHIP.hbm_bandwidth
    assert report.peak_sram_bytes_per_core <= HBM_CHIP.sram_bytes_per_core


def test_basic_prefetches_at_most_the_next_operator(designs):
    for program in designs["basic"].programs:
        since_execute = 0
        for entry in program.preload_schedule.stream:
            since_execute = 0 if entry[0] == "execute" else since_execute + 1
            assert since_execute <= 2  # the next operator's (plus, at a run start, the first's)


def test_elk_full_runs_exactly_and_executors_agree(designs):
    # the fixture's programs are the ones run (tests/test_workloads.py: tvm_icca.compile
    # plans the same programs as compile_programs)
    stats, report = run_against_llvm(_tiny_llama(), HBM_CHIP, "elk-full",
                                     planned=designs["elk-full"].module)
    assert report.design == "elk-full"
    assert stats["preloads"] == report.preloads > 0


def test_off_and_sram_only_chips_have_no_schedule(cache):
    mod = _tiny_llama().mod
    assert compile_programs(mod, HBM_CHIP, preload="off",
                            plan_cache=cache).programs[0].preload_schedule is None
    sram_only = small_chip(64, 64 * 1024)
    assert compile_programs(mod, sram_only, plan_cache=cache).programs[0].preload_schedule is None
    with pytest.raises(IccaError, match="has no HBM"):
        compile_programs(mod, sram_only, preload="elk-full")
    with pytest.raises(IccaError, match="unknown preload design"):
        compile_programs(mod, HBM_CHIP, preload="elk")


def test_designs_of_one_chip_share_their_tradeoff_tables():
    """A plan cache builds an operator's table once per chip (the designs of a sweep point
    read the same tables); another chip's tables are built again, and a table built without
    the cache is equal to the cached one."""
    from tvm_icca.model_pass.tradeoff_tables import operator_tables

    cache = PlanCache(jobs=1)
    programs = list(compile_programs(_tiny_llama().mod, HBM_CHIP, plan_cache=cache,
                                     state="hbm", preload="off").programs)
    first = operator_tables(programs, HBM_CHIP, cache)
    again = operator_tables(programs, HBM_CHIP, cache)
    assert all(a.execs is b.execs and a.preloads is b.preloads for a, b in zip(first, again))
    assert first == operator_tables(programs, HBM_CHIP, PlanCache(jobs=1))
    slower = HBM_CHIP.with_overrides(hbm_bandwidth=HBM_CHIP.hbm_bandwidth / 1000)
    other = operator_tables(programs, slower, cache)
    assert any(a.preloads for a in first)
    assert any(a.preloads != b.preloads for a, b in zip(first, other))


#: A chip whose SRAM the models' preloads fill: 20 KiB per core and a 512-byte shift buffer,
#: so the slack the budget rule once hid in the shift buffer is gone.
TIGHT_CHIP = small_chip(16, 20 * 1024).with_overrides(name="hbm-16-tight", hbm_bandwidth=1e12,
                                                      hbm_controllers=2, shift_buffer_bytes=512)


def _tiny_dit():
    return get_workload("dit-xl2", tiny=True, batch=2)


@pytest.fixture(scope="module")
def tight(cache):
    """(model, design, chip) -> the model's programs on ``chip`` (TIGHT_CHIP by default) under
    ``design``: each model planned once per chip (``preload="off"``), each design's Elk pass
    run on those programs, which is what ``compile_programs(..., preload=design)`` gives
    (the planner's programs do not depend on the design: tests/test_piece_grouping.py,
    test_compile_programs_schedules_what_the_elk_pass_gives; the Ideal test below compares).
    A refusal at compile time, by the planner or the Elk pass, is raised as compiling with
    the design raises it."""
    planned: dict = {}
    made: dict = {}

    def compiled(make, design, chip=TIGHT_CHIP):
        if (make, chip) not in planned:
            try:
                planned[make, chip] = compile_programs(make().mod, chip, plan_cache=cache,
                                                       preload="off")
            except IccaError as err:
                planned[make, chip] = err
        model = planned[make, chip]
        if isinstance(model, IccaError):
            raise model
        if (make, design, chip) not in made:
            programs, summary = schedule_preloads(list(model.programs), chip, cache, design)
            made[make, design, chip] = dataclasses.replace(model, programs=tuple(programs),
                                                           preload=summary)
        return made[make, design, chip]
    return compiled


@pytest.mark.parametrize("make", [pytest.param(_tiny_dit, marks=pytest.mark.long_run), _tiny_llama],
                         ids=["dit", "llama"])  # DiT's 7 s in make test-full
def test_the_device_admits_every_program_the_compiler_emits(make, tight):
    """Every design's program on a chip its model's preloads fill passes the device's SRAM
    rule (runtime_sim.contract.sram_budget) on the stream's memory model, and the peaks it
    reports fit. The Ideal design once counted each preload at the smallest space of any of
    its operator's plans, and not its own beside those issued before it: the tiny DiT then
    held 24,988 bytes of preload space per core on this 20,480-byte chip (DiT-XL/2 at batch
    32 on 1,104 cores, Elk Fig. 23: 1,072 bytes too many)."""
    for design in PRELOAD_DESIGNS:
        report = tight(make, design).simulate()
        assert report.peak_sram_bytes_per_core <= TIGHT_CHIP.sram_bytes_per_core
        assert 0 < report.peak_preload_bytes_per_core <= TIGHT_CHIP.sram_bytes_per_core


def test_ideal_on_a_full_chip_runs_on_the_functional_device(tight, cache):
    """The functional device, which checks every instruction in stream order, runs the tiny
    DiT's Ideal program on the tight chip (it refused it with SramOverflowError before the
    Ideal design counted the preload space its program holds): the program the test above
    timed, as tests/test_workloads.py checks tvm_icca.compile plans it too."""
    ideal = compile_programs(_tiny_dit().mod, TIGHT_CHIP, plan_cache=cache, preload="ideal")
    assert [dataclasses.replace(p, module="") for p in ideal.programs] == \
        [dataclasses.replace(p, module="") for p in tight(_tiny_dit, "ideal").programs]
    stats, report = run_against_llvm(_tiny_dit(), TIGHT_CHIP, "ideal", planned=ideal.module)
    assert stats["peak_preload_bytes_per_core"] == report.peak_preload_bytes_per_core
    assert report.peak_preload_bytes_per_core > TIGHT_CHIP.usable_sram_bytes  # the chip is full


def _tight_chip(sram_bytes: int):
    """16 cores of ``sram_bytes`` (8,192 of them the shift buffer), HBM beside them."""
    return preset("ipu-mk2").with_overrides(name="icca-16", num_cores=16, sram_bytes_per_core=sram_bytes,
                                            hbm_controllers=2, hbm_bandwidth=1e11)


def _tiny_llama_7b():
    return get_workload("llama2-7b", tiny=True, context=64)


@pytest.mark.parametrize("design", ["static", "elk-full", "elk-dyn"])
def test_schedule_of_split_pieces_fits_a_tight_chip(design, tight):
    """A tiny Llama2-7B decode whose embedding lives in HBM on 16 cores of 9,000 bytes: what
    the compiler schedules must run (the device's SRAM rule, runtime_sim.contract.sram_budget).
    Static's schedule preloaded the next piece of a split down projection, and a later
    operator's weights, while the earlier pieces' outputs and their shared input were still
    held: 9,040 bytes on core 0, which the Elk pass's memory model now counts
    (runtime_sim.contract.lifetimes.held_between)."""
    compiled = tight(_tiny_llama_7b, design, _tight_chip(9000))
    assert compiled.simulate().total_s > 0


@pytest.mark.parametrize("sram_bytes", [8600, 9200, 10000])
def test_tight_chips_compile_and_run_or_refuse_at_compile_time(sram_bytes, tight):
    """Around the chip above, each design either compiles a schedule the timing simulator runs
    within SRAM, or refuses at compile time with a tvm_icca error; never an SRAM overflow
    found at simulation. (Static overflowed at 9,200 and 10,000 bytes too; at 8,600 the
    region planner already finds no plan.)"""
    for design in ("static", "elk-full", "elk-dyn"):
        try:
            compiled = tight(_tiny_llama_7b, design, _tight_chip(sram_bytes))
        except IccaError:   # a refusal at compile time (the simulation below must not raise)
            continue
        assert compiled.simulate().total_s > 0
