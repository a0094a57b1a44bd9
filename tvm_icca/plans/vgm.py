"""Tile selection for the virtual-global-memory baseline (T10 §2.2; Roller-style rTiles).

Roller builds a tile ("rTile") aligned to the hardware's compute unit and grows it while the
per-core memory allows, because larger tiles re-fetch less data per FLOP. This module does
the same for :class:`runtime_sim.contract.plan.VgmPlan`: tiles start at one element per axis
(whole axes where the operator needs them whole) and the axis whose doubling most reduces
the estimated time is doubled until nothing improves or the working set would not fit the
SRAM left after the VGM region; the estimate charges the matrix unit's padding to its tile
shape (16 on the IPU), so the growth settles on aligned tiles. The estimate assumes perfectly balanced links, as a VGM
compiler does; the simulator then charges the hot spots the real placement causes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from runtime_sim.contract.errors import PlanNotFoundError, operator_subject
from runtime_sim.contract.expr import TensorExpr, dtype_bytes
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.plan import VgmPlan
from runtime_sim.contract.plan_rules import pinned_axes
from runtime_sim.contract.vgm_layout import VgmLayout
from schedules import template_for


@dataclass(frozen=True)
class PlannedVgmOp:
    expr: TensorExpr
    plan: VgmPlan
    layout: VgmLayout
    estimated_time_s: float
    memory_bytes_per_core: int


def estimate_vgm_time(layout: VgmLayout, hw: HardwareSpec) -> float:
    """Load-compute-store time with every link equally loaded (no hot spots)."""
    expr = layout.expr
    lo = {a: 0 for a in layout.extent}
    hi = dict(layout.tile)
    fetch = 0
    for t in range(len(expr.inputs)):
        if t in expr.epilogue_inputs:
            continue
        box = layout.tile_box(t, lo, hi)
        fetch += math.prod(max(e - s, 0) for s, e in box) * dtype_bytes(expr.inputs[t].dtype)
    out = math.prod(layout.tile[a] for a in layout.spatial) * dtype_bytes(expr.output.dtype)
    step = (template_for(expr.kind).subtask_cycles(expr, layout.tile, hw) + hw.sync_cycles) / hw.clock_hz
    per_wave = layout.num_chunks * (fetch / hw.link_bandwidth + step) + out / hw.link_bandwidth
    return layout.waves * per_wave


def plan_vgm_operator(expr: TensorExpr, hw: HardwareSpec, vgm_region_bytes: int | None = None,
                      name: str | None = None) -> PlannedVgmOp:
    """Roller-style tiles for ``expr``; ``vgm_region_bytes`` is the per-core VGM reservation.

    By default the region holds the operator's own tensors; a whole-model compile passes the
    region of every tensor the model keeps in the VGM.
    """
    pinned = pinned_axes(expr)
    tiles = {a.name: (a.extent if a.name in pinned else 1) for a in expr.axes}
    region = VgmLayout(expr, VgmPlan(tiles), hw.num_cores).vgm_bytes_per_core() \
        if vgm_region_bytes is None else int(vgm_region_bytes)
    budget = hw.usable_sram_bytes - region
    layout = VgmLayout(expr, VgmPlan(tiles), hw.num_cores)
    if layout.working_bytes_per_core() > budget:
        raise PlanNotFoundError(
            f"{operator_subject(name or expr.kind)} ({expr.tensor_summary()}) does not fit a VGM "
            f"on chip '{hw.name}': its smallest tiles need {layout.working_bytes_per_core()} "
            f"bytes per core next to a VGM region of {region} bytes, on cores of "
            f"{hw.usable_sram_bytes} usable bytes"
        )
    best = estimate_vgm_time(layout, hw)
    while True:
        options = []
        for a in expr.axes:
            if a.name in pinned or tiles[a.name] >= a.extent:
                continue
            trial_tiles = {**tiles, a.name: min(2 * tiles[a.name], a.extent)}
            trial = VgmLayout(expr, VgmPlan(trial_tiles), hw.num_cores)
            if trial.working_bytes_per_core() > budget:
                continue
            options.append((estimate_vgm_time(trial, hw), a.name, trial_tiles, trial))
        if not options:
            break
        time_s, _, trial_tiles, trial = min(options, key=lambda o: o[0])
        if time_s >= best:
            break
        best, tiles, layout = time_s, trial_tiles, trial
    return PlannedVgmOp(expr, VgmPlan(tiles), layout, best, region + layout.working_bytes_per_core())
