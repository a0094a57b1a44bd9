"""Tile selection for the virtual-global-memory baseline (T10 §2.2; Roller and Ansor on an IPU).

T10 §6.1-6.2 measures its compute-shift plans against two compilers that run on a virtual
global memory (VGM): Roller (OSDI'22) and Ansor (OSDI'20, ported to the IPU). Both cut an
operator into tiles that one core loads from the VGM, computes and stores back, and both pick
the tile shape per operator ("they have similar performance by exploring the same
optimization space", T10 §6.2). This module is that choice for
:class:`runtime_sim.contract.plan.VgmPlan`, as an expert user of either would run it:

* **Aligned tiles** (Roller §3.1): a tile's extent on an axis is a power of two or an even
  split of the axis (``ceil(extent / 2^j)``, aligned to the tensor's shape so that no tile is
  mostly padding), or the whole axis; the estimate charges the matrix unit's padding to its
  tile (16 on the IPU, T10 §4.3.1), so unaligned shapes lose.
* **Sized to the memory** (Roller §3.2, scaling up an rTile to the memory layer): the working
  set of one chunk (its input boxes and the output tile) must fit the SRAM a core has left
  next to its VGM slice; the VGM slice is every tensor the model keeps (T10 §2.2), passed in
  by the compiler (weights plus the largest live activations,
  :func:`tvm_icca.model_pass.calls.on_chip_reservation`).
* **Tiles kept in a core while they are reused** (Roller §3.2: an rTile stays in the faster
  memory layer across the computation that reuses it): ``reuse`` plans give each core
  consecutive tiles along the innermost axis of a tile order, and a core does not fetch again
  an input box it already holds (:meth:`runtime_sim.contract.vgm_layout.VgmLayout.traffic`);
  the search picks the innermost axis with the estimate.
* **Search** (Ansor §5 searches tile sizes with a cost model; Roller §3.2 grows the tile
  along the axis that most improves its reuse score, memory traffic saved per footprint
  added): ``search="exhaustive"`` evaluates every aligned shape when the space has at most
  :data:`EXHAUSTIVE_LIMIT` of them, else runs a coordinate search (every aligned size of one
  axis at a time, best move first, until none improves) from the greedy result and from
  whole-reduction tiles; ``search="greedy"`` is Roller's growth alone (double the axis whose
  doubling most reduces the estimate until nothing improves).

The estimate assumes perfectly balanced links, as a VGM compiler does; the timing simulator
then charges the hot spots the real placement causes (:mod:`runtime_sim.timing.vgm_timing`).
Fused elementwise epilogues (bias, activation) run in the same operator, as TVM and Roller
fuse them: the operators come from the same fused Relax functions as the compute-shift plans.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
from dataclasses import dataclass

from runtime_sim.contract.errors import IccaError, PlanNotFoundError, operator_subject
from runtime_sim.contract.expr import TensorExpr, dtype_bytes
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.plan import VgmPlan
from runtime_sim.contract.plan_rules import pinned_axes
from runtime_sim.contract.vgm_layout import VgmLayout
from runtime_sim.machine.links import chunk_latency_seconds, link_transfer_seconds
from schedules import template_for

#: Tile searches of the VGM planner.
VGM_SEARCHES = ("exhaustive", "greedy")

#: Largest number of aligned tile shapes the search evaluates one by one (about a second of
#: estimates per operator); larger spaces (convolutions at large batch) use the coordinate
#: search, which reaches the same optimum on every space small enough to check
#: (tests/test_vgm.py).
EXHAUSTIVE_LIMIT = 4096


@dataclass(frozen=True)
class PlannedVgmOp:
    expr: TensorExpr
    plan: VgmPlan
    layout: VgmLayout
    estimated_time_s: float
    memory_bytes_per_core: int


def fetches_per_core(layout: VgmLayout, t: int) -> int:
    """Times the busiest core fetches its box of input ``t`` over the operator.

    Without ``reuse``: once per wave and chunk. With it, an input whose box does not change
    between chunks is fetched once per run of :meth:`VgmLayout.reuse_run` consecutive tiles;
    a core's ``waves`` consecutive tiles start anywhere in such a run, so they cross at most
    ``ceil((waves - 1) / run)`` boundaries between runs.
    """
    if not layout.reuse or layout.chunk_dependent(t):
        return layout.waves * layout.num_chunks
    run = layout.reuse_run(t)
    return min(layout.waves, 1 + math.ceil((layout.waves - 1) / run))


def estimate_vgm_time(layout: VgmLayout, hw: HardwareSpec) -> float:
    """Load-compute-store time with every link equally loaded (no hot spots).

    Per wave and chunk: the fetch of the input boxes over the core's link (each staged chunk
    paying the link latency, :func:`runtime_sim.machine.links.link_transfer_seconds`), the
    sub-task on the op template and a synchronization; per wave: the epilogue and the store
    of the output tile (with the epilogue's inputs). Inputs a ``reuse`` plan keeps are
    fetched :func:`fetches_per_core` times.
    """
    expr = layout.expr
    lo = {a: 0 for a in layout.extent}
    hi = dict(layout.tile)
    phases = layout.waves * layout.num_chunks
    fetched = 0
    for t in range(len(expr.inputs)):
        if t in expr.epilogue_inputs:
            continue
        box = layout.tile_box(t, lo, hi)
        nbytes = math.prod(max(e - s, 0) for s, e in box) * dtype_bytes(expr.inputs[t].dtype)
        fetched += nbytes * fetches_per_core(layout, t)
    store = math.prod(layout.tile[a] for a in layout.spatial) * dtype_bytes(expr.output.dtype)
    for t in expr.epilogue_inputs:
        box = layout.tile_box(t, lo, hi)
        store += math.prod(max(e - s, 0) for s, e in box) * dtype_bytes(expr.inputs[t].dtype)
    template = template_for(expr.kind)
    step = (template.subtask_cycles(expr, layout.tile, hw) + hw.sync_cycles) / hw.clock_hz
    epilogue = template.epilogue_cycles(expr, {a: layout.tile[a] for a in layout.spatial}, hw) / hw.clock_hz
    per_phase = fetched / phases
    transfer = fetched / hw.link_bandwidth + phases * chunk_latency_seconds(per_phase, hw) if fetched else 0.0
    return transfer + phases * step + layout.waves * (link_transfer_seconds(store, hw) + epilogue)


def candidate_tiles(extent: int) -> list[int]:
    """Aligned tile sizes of an axis (Roller §3.1): powers of two below the extent, the even
    splits ``ceil(extent / 2^j)`` of the axis, and the whole axis."""
    sizes = {extent}
    p = 1
    while p < extent:
        sizes.add(p)
        sizes.add(math.ceil(extent / p))
        p *= 2
    return sorted(sizes)


class _Search:
    """The estimate of every tile shape and order tried, under one SRAM budget."""

    def __init__(self, expr: TensorExpr, hw: HardwareSpec, budget: int, reuse: bool):
        self.expr, self.hw, self.budget, self.reuse = expr, hw, budget, reuse
        self.seen: dict[tuple[int, ...], tuple[float, VgmLayout | None]] = {}
        self.names = [a.name for a in expr.axes]

    def evaluate(self, tiles: dict[str, int]) -> tuple[float, VgmLayout | None]:
        """The estimate of ``tiles`` under its best order (inf if it does not fit)."""
        key = tuple(tiles[a] for a in self.names)
        if key in self.seen:
            return self.seen[key]
        layout = VgmLayout(self.expr, VgmPlan(dict(tiles), reuse=self.reuse), self.hw.num_cores)
        best: tuple[float, VgmLayout | None] = (math.inf, None)
        if layout.working_bytes_per_core() <= self.budget:
            best = (estimate_vgm_time(layout, self.hw), layout)
            if self.reuse and layout.waves > 1:
                # the innermost axis of the order decides which inputs a core keeps
                for inner in layout.spatial:
                    if layout.count[inner] > 1 and inner != layout.order[-1]:
                        order = tuple(a for a in layout.spatial if a != inner) + (inner,)
                        trial = VgmLayout(self.expr, VgmPlan(dict(tiles), order, True), self.hw.num_cores)
                        time_s = estimate_vgm_time(trial, self.hw)
                        if time_s < best[0]:
                            best = (time_s, trial)
        self.seen[key] = best
        return best


def _greedy(search: _Search, tiles: dict[str, int], pinned: set[str]) -> dict[str, int]:
    """Roller's growth: double the axis whose doubling most reduces the estimate."""
    best = search.evaluate(tiles)[0]
    while True:
        options = []
        for a in search.expr.axes:
            if a.name in pinned or tiles[a.name] >= a.extent:
                continue
            trial = {**tiles, a.name: min(2 * tiles[a.name], a.extent)}
            options.append((search.evaluate(trial)[0], a.name, trial))
        if not options:
            return tiles
        time_s, _, trial = min(options, key=lambda o: o[0])
        if time_s >= best:
            return tiles
        best, tiles = time_s, trial


def _coordinate(search: _Search, tiles: dict[str, int], sizes: dict[str, list[int]]) -> dict[str, int]:
    """From ``tiles``, move one axis at a time to whichever aligned size is best, taking the
    best move over all axes, until no move improves the estimate."""
    best = search.evaluate(tiles)[0]
    while True:
        moves = [(search.evaluate({**tiles, a: s})[0], a, s)
                 for a, options in sizes.items() for s in options if s != tiles[a]]
        if not moves:
            return tiles
        time_s, a, s = min(moves)
        if time_s >= best:
            return tiles
        best, tiles = time_s, {**tiles, a: s}


def plan_vgm_operator(expr: TensorExpr, hw: HardwareSpec, vgm_region_bytes: int | None = None,
                      name: str | None = None, search: str = "exhaustive",
                      reuse: bool = True) -> PlannedVgmOp:
    """The fastest aligned VGM tiles for ``expr`` under the estimate (see the module).

    Parameters
    ----------
    expr : TensorExpr
        The operator.
    hw : HardwareSpec
        The chip.
    vgm_region_bytes : int, optional
        The per-core VGM reservation; by default the region of the operator's own tensors (a
        whole-model compile passes the region of every tensor the model keeps in the VGM).
    name : str, optional
        The operator's name, for errors.
    search : str
        ``"exhaustive"`` (every aligned shape, or the coordinate search on large spaces) or
        ``"greedy"`` (Roller's growth alone), :data:`VGM_SEARCHES`.
    reuse : bool
        Plan blocked tile assignment with resident input boxes (:class:`VgmPlan`).

    Returns
    -------
    PlannedVgmOp
        The plan, its layout, its estimated time and its SRAM per core.

    Raises
    ------
    PlanNotFoundError
        The smallest tiles do not fit next to the VGM region.
    """
    if search not in VGM_SEARCHES:
        raise IccaError(f"unknown VGM tile search {search!r}; choose one of {VGM_SEARCHES}")
    pinned = pinned_axes(expr)
    smallest = {a.name: (a.extent if a.name in pinned else 1) for a in expr.axes}
    layout = VgmLayout(expr, VgmPlan(smallest), hw.num_cores)
    region = layout.vgm_bytes_per_core() if vgm_region_bytes is None else int(vgm_region_bytes)
    budget = hw.usable_sram_bytes - region
    if layout.working_bytes_per_core() > budget:
        raise PlanNotFoundError(
            f"{operator_subject(name or expr.kind)} ({expr.tensor_summary()}) does not fit a VGM "
            f"on chip '{hw.name}': its smallest tiles need {layout.working_bytes_per_core()} "
            f"bytes per core next to a VGM region of {region} bytes, on cores of "
            f"{hw.usable_sram_bytes} usable bytes"
        )
    # the same shapes recur in every layer of a model: search once per shape (names aside)
    shape = expr.to_dict()
    for i, access in enumerate(shape["inputs"] + [shape["output"]]):
        access["name"] = f"t{i}"
    tiles, order, planned_reuse, best = _search_tiles(
        json.dumps(shape, sort_keys=True), json.dumps(hw.to_dict(), sort_keys=True), budget, search, reuse)
    layout = VgmLayout(expr, VgmPlan(dict(tiles), order, planned_reuse), hw.num_cores)
    return PlannedVgmOp(expr, layout.plan, layout, best, region + layout.working_bytes_per_core())


@functools.lru_cache(maxsize=4096)
def _search_tiles(expr_json: str, hw_json: str, budget: int, search: str, reuse: bool):
    """The search of :func:`plan_vgm_operator` on an operator's shapes (names replaced):
    ``(tiles as (axis, size) pairs, order, reuse, estimate)``."""
    expr = TensorExpr.from_dict(json.loads(expr_json))
    hw = HardwareSpec.from_dict(json.loads(hw_json))
    pinned = pinned_axes(expr)
    smallest = {a.name: (a.extent if a.name in pinned else 1) for a in expr.axes}
    state = _Search(expr, hw, budget, reuse)
    tiles = _greedy(state, smallest, pinned)
    if search == "exhaustive":
        sizes = {a.name: ([a.extent] if a.name in pinned else candidate_tiles(a.extent)) for a in expr.axes}
        if math.prod(len(s) for s in sizes.values()) <= EXHAUSTIVE_LIMIT:
            for combo in itertools.product(*sizes.values()):
                state.evaluate(dict(zip(sizes, combo)))
        else:
            whole = {a.name: (a.extent if a.reduce or a.name in pinned else 1) for a in expr.axes}
            for seed in (tiles, smallest, whole):
                _coordinate(state, dict(seed), sizes)
        key = min(state.seen, key=lambda k: state.seen[k][0])
        tiles = dict(zip(state.names, key))
    best, layout = state.evaluate(tiles)
    assert layout is not None  # the smallest tiles fit, and the search only keeps better ones
    return tuple(layout.plan.tiles.items()), tuple(layout.plan.order), layout.plan.reuse, best
