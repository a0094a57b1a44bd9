"""The VGM baseline: home-slice traffic, hot spots in closed form, tile selection."""

import itertools
import math

import numpy as np
import pytest

from runtime_sim.contract.plan import VgmPlan, plan_from_dict
from runtime_sim.contract.presets import preset, small_chip
from runtime_sim.contract.vgm_layout import VgmLayout, home_counts_many
from runtime_sim.timing.vgm_timing import vgm_op_timing
from tvm_icca.plan_search import plan_operator
from tvm_icca.plan_search import vgm as vgm_plans
from tvm_icca.plan_search.vgm import candidate_tiles, estimate_vgm_time, fetches_per_core, plan_vgm_operator


# A second, box-at-a-time computation of home counts: the reference home_counts_many is
# checked against (itself checked against brute force below).
def _home_counts(box: tuple[tuple[int, int], ...], shape: tuple[int, ...], slice_elems: int,
                 num_cores: int) -> np.ndarray:
    """Elements of a box homed on each core when the tensor is split linearly into slices."""
    counts = np.zeros(num_cores + 1, np.int64)
    if any(e <= s for s, e in box):
        return counts[:num_cores]
    if not shape:  # a scalar lives on the first core
        counts[0] = 1
        return counts[:num_cores]
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    # Merge trailing dimensions the box covers entirely into longer contiguous runs.
    last = len(shape) - 1
    while last > 0 and box[last] == (0, shape[last]):
        last -= 1
    run = (box[last][1] - box[last][0]) * strides[last]
    starts = np.array([box[last][0] * strides[last]], np.int64)
    for d in range(last - 1, -1, -1):
        s, e = box[d]
        starts = (np.arange(s, e, dtype=np.int64)[:, None] * strides[d] + starts[None, :]).ravel()
    ends = starts + run
    first = starts // slice_elems
    final = (ends - 1) // slice_elems
    same = first == final
    np.add.at(counts, first[same], run)
    split = ~same
    if split.any():
        f, l, s, e = first[split], final[split], starts[split], ends[split]
        np.add.at(counts, f, (f + 1) * slice_elems - s)
        np.add.at(counts, l, e - l * slice_elems)
        # Whole slices strictly between the first and last home core of a long run.
        diff = np.zeros(num_cores + 2, np.int64)
        np.add.at(diff, f + 1, slice_elems)
        np.add.at(diff, l, -slice_elems)
        counts[: num_cores + 1] += np.cumsum(diff)[: num_cores + 1]
    return counts[:num_cores]


@pytest.mark.parametrize("shape,box,cores", [
    ((6, 10), ((1, 4), (2, 9)), 7),
    ((4, 5, 6), ((0, 4), (1, 3), (0, 6)), 5),
    ((3, 8), ((0, 3), (0, 8)), 2),
    ((50,), ((3, 47),), 4),
    ((2, 3, 4, 5), ((1, 2), (0, 3), (2, 4), (1, 5)), 11),
])
def test_home_counts_match_brute_force(shape, box, cores):
    size = math.prod(shape)
    slice_elems = math.ceil(size / cores)
    want = np.zeros(cores, np.int64)
    for idx in itertools.product(*[range(s, e) for s, e in box]):
        want[np.ravel_multi_index(idx, shape) // slice_elems] += 1
    got = _home_counts(box, shape, slice_elems, cores)
    np.testing.assert_array_equal(got, want)


def test_home_counts_of_many_boxes_sum_single_boxes():
    rng = np.random.default_rng(0)
    shape, cores = (5, 7, 6), 9
    slice_elems = math.ceil(math.prod(shape) / cores)
    starts = np.stack([rng.integers(0, s, 40) for s in shape], axis=1)
    ends = np.stack([rng.integers(starts[:, d] + 1, s + 1) for d, s in enumerate(shape)], axis=1)
    ends[::5] = shape  # some boxes cover whole trailing dimensions
    starts[::5, 1:] = 0
    weights = rng.integers(1, 4, 40)
    want = sum(w * _home_counts(tuple(zip(a, b)), shape, slice_elems, cores)
               for a, b, w in zip(starts, ends, weights))
    np.testing.assert_array_equal(home_counts_many(starts, ends, weights, shape, slice_elems, cores), want)


def test_every_core_reading_one_slice_is_serialized(exprs):
    """N cores fetch the same row of B, homed on one core: its link serves them in turn."""
    hw = small_chip(8, 64 * 1024)
    # B is 8 x 8 fp16 over 8 cores: one row (16 bytes) per core. Tiles: n = 8, m = 1 -> 8
    # tiles on 8 cores, k chunk 1: every core needs B[k, :] which lives on core k.
    expr = exprs.matmul(8, 8, 8, "float16")
    plan = VgmPlan({"m": 1, "n": 8, "k": 1})
    timing = vgm_op_timing(expr, plan, hw)
    layout = VgmLayout(expr, plan, hw.num_cores)
    assert layout.num_tiles == 8 and layout.waves == 1 and layout.num_chunks == 8
    fetched, served = layout.traffic([0, 1], layout.tile_origins(0), {"k": 0})
    # Every core fetches A[m, 0] (2 bytes) and B[0, :] (16 bytes); core 0 homes all of B[0,:]
    # and A[:, 0] is spread over the cores homing A's rows.
    assert fetched.tolist() == [18] * 8
    assert served[0] == 8 * 16 + 2
    # Without multicast the busiest link (core k homing row k) moves 8 * 16 bytes per chunk.
    unicast = vgm_op_timing(expr, plan, hw, multicast=False)
    assert unicast.transfer_s > 8 * (8 * 16) / hw.link_bandwidth
    assert unicast.stall_s > 0
    # The exchange multicasts: core 0 sends B[0, :] once, plus its own A piece; no hot spot.
    _, served = layout.traffic([0, 1], layout.tile_origins(0), {"k": 0}, multicast=True)
    assert served[0] == 16 + 2
    assert timing.stall_s == 0 and timing.transfer_s < unicast.transfer_s
    assert timing.bytes_moved == unicast.bytes_moved


def test_tiles_fit_memory_and_grow_to_matrix_unit(exprs):
    hw = preset("ipu-mk2")
    planned = plan_vgm_operator(exprs.matmul(4096, 1024, 4096, "float16"), hw)
    assert planned.memory_bytes_per_core <= hw.usable_sram_bytes
    for a, t in planned.plan.tiles.items():
        assert t >= hw.matrix_tile[0], (a, t)  # growing stops no earlier than the unit's tile
    # The estimate ignores hot spots, so the simulated time can only be larger.
    sim = vgm_op_timing(planned.expr, planned.plan, hw)
    assert sim.time_s >= planned.estimated_time_s * 0.999
    assert estimate_vgm_time(planned.layout, hw) == pytest.approx(planned.estimated_time_s)


def test_compute_shift_beats_vgm_on_large_matmuls(exprs):
    hw = preset("ipu-mk2")
    for shape in [(4096, 1024, 4096), (32, 5120, 15360)]:
        expr = exprs.matmul(*shape, "float16")
        vgm = vgm_op_timing(expr, plan_vgm_operator(expr, hw).plan, hw)
        t10 = plan_operator(expr, hw)
        assert vgm.time_s > t10.time_s, shape


def test_vgm_plan_round_trips():
    plan = VgmPlan({"m": 32, "n": 16})
    assert plan_from_dict(plan.to_dict()) == plan
    assert "reuse" not in plan.to_dict()  # existing programs keep their bytes
    kept = VgmPlan({"m": 32, "n": 16}, ("n", "m"), True)
    assert plan_from_dict(kept.to_dict()) == kept


def test_reuse_keeps_a_row_of_a_in_each_core(exprs):
    """16 tiles of 2 x 2 on 4 cores, whole k: blocked, core c runs the 4 tiles of A's row
    block c, so it fetches that block once instead of 4 times (closed form)."""
    hw = small_chip(4, 64 * 1024)
    expr = exprs.matmul(8, 8, 8)
    cyclic = VgmPlan({"m": 2, "n": 2, "k": 8})
    blocked = VgmPlan({"m": 2, "n": 2, "k": 8}, reuse=True)
    layout = VgmLayout(expr, blocked, hw.num_cores)
    assert (layout.num_tiles, layout.waves, layout.num_chunks) == (16, 4, 1)
    assert layout.reuse_run(0) == 4 and layout.reuse_run(1) == 1
    a_box = 2 * 8 * 4  # bytes of A[2 rows, 8] in float32
    saved = vgm_op_timing(expr, cyclic, hw).bytes_moved - vgm_op_timing(expr, blocked, hw).bytes_moved
    assert saved == 4 * (4 - 1) * a_box
    # B's column blocks are the ones kept with n outermost
    b_first = VgmPlan({"m": 2, "n": 2, "k": 8}, ("n", "m"), True)
    assert vgm_op_timing(expr, cyclic, hw).bytes_moved - vgm_op_timing(expr, b_first, hw).bytes_moved == saved
    # the planner's estimate bounds the busiest core: 4 consecutive tiles of a core may
    # straddle two row blocks in general (here they do not: 1 fetch each)
    assert fetches_per_core(layout, 0) == 2 and fetches_per_core(layout, 1) == 4


def test_candidate_tiles_are_aligned():
    assert candidate_tiles(14) == [1, 2, 4, 7, 8, 14]
    assert candidate_tiles(16) == [1, 2, 4, 8, 16]
    assert candidate_tiles(1) == [1]


def _brute_force(expr, hw, budget):
    """The lowest estimate over every aligned tile shape and innermost axis, independently."""
    names = [a.name for a in expr.axes]
    best = math.inf
    for combo in itertools.product(*[candidate_tiles(a.extent) for a in expr.axes]):
        tiles = dict(zip(names, combo))
        for order in itertools.permutations([a.name for a in expr.axes if not a.reduce]):
            layout = VgmLayout(expr, VgmPlan(tiles, order, True), hw.num_cores)
            if layout.working_bytes_per_core() <= budget:
                best = min(best, estimate_vgm_time(layout, hw))
    return best


@pytest.mark.parametrize("limit", [vgm_plans.EXHAUSTIVE_LIMIT, 0])
def test_search_finds_the_exhaustive_optimum(exprs, monkeypatch, limit):
    """Exhaustive enumeration, and the coordinate search used on large spaces, both reach the
    brute-force minimum of the estimate on small operators."""
    monkeypatch.setattr(vgm_plans, "EXHAUSTIVE_LIMIT", limit)
    hw = small_chip(8, 16 * 1024)
    for expr in (exprs.matmul(48, 40, 36, "float16"), exprs.matmul(20, 64, 24)):
        vgm_plans._search_tiles.cache_clear()
        planned = plan_vgm_operator(expr, hw, vgm_region_bytes=0)
        want = _brute_force(expr, hw, hw.usable_sram_bytes)
        assert planned.estimated_time_s == pytest.approx(want)
        greedy = plan_vgm_operator(expr, hw, vgm_region_bytes=0, search="greedy")
        assert greedy.estimated_time_s >= planned.estimated_time_s
    vgm_plans._search_tiles.cache_clear()


def test_same_region_compiles_either_way_and_runs_on_the_device_either_way():
    from tvm import relax

    import tvm_icca
    from runtime_sim.contract.errors import DeviceProgramError
    from runtime_sim.functional.device import SimulatedDevice
    from runtime_sim.timing import simulate_timing
    from runtime_sim.timing.vgm_timing import simulate_vgm_timing
    from tvm_icca.model_pass.region_plans import compile_region

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((64, 128), "float16"))
    w = relax.Var("w", relax.TensorType((128, 96), "float16"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.matmul(x, w))
        bb.emit_func_output(y)
    hw = small_chip(16, 64 * 1024)
    (name, func), = tvm_icca.icca_regions(tvm_icca.partition_for_icca(bb.get(), hw=hw)).items()
    t10 = compile_region(func, name, hw)
    vgm = compile_region(func, name, hw, execution="vgm")
    assert isinstance(vgm.ops[0].plan, VgmPlan) and not isinstance(t10.ops[0].plan, VgmPlan)
    assert simulate_timing([t10]).total_s > 0
    report = simulate_vgm_timing([vgm])
    assert report.total_s > 0 and report.fits
    # the functional device runs both on data; VGM timing stays with simulate_vgm_timing
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((64, 128)).astype(np.float16),
              rng.standard_normal((128, 96)).astype(np.float16)]
    np.testing.assert_allclose(SimulatedDevice().run(vgm, inputs)[0].astype(np.float32),
                               SimulatedDevice().run(t10, inputs)[0].astype(np.float32),
                               rtol=1e-2, atol=1e-2)
    with pytest.raises(DeviceProgramError, match="simulate_vgm_timing"):
        simulate_timing([vgm])
