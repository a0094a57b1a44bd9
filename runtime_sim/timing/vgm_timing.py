"""The virtual-global-memory (VGM) execution model: the baseline T10 is measured against.

Compilers that mimic a shared memory on an ICCA chip (T10 §2.2, Fig. 2a: Roller, Ansor,
PopART) reserve part of every core's SRAM as a *virtual global memory*: every tensor is spread
linearly over all cores (its *home slices*); the running operator is cut into tiles, and each
core loads the pieces of its input tiles from their home cores, computes, and stores its output
tile home ("load-compute-store"). Two effects make it slow, and both are simulated here from the
actual per-core traffic rather than assumed:

* a core's link serves every request for its home slice one after another (Elk §2.1), so when
  the tiles of a wave share an input region, the few cores homing it become hot spots;
* tiles are fetched from many cores and re-fetched by every tile that needs them (no reuse
  across cores), and the VGM region shrinks the memory left for tiles.

:class:`VgmLayout` gives, for a :class:`~runtime_sim.contract.plan.VgmPlan`, the tiles, waves, per-core
memory and, for every wave and reduction chunk, the bytes each core receives and each home core
sends. :func:`vgm_op_timing` turns that into time on an all-to-all chip.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from runtime_sim.contract.energy import ActionCounts, RunEnergy, run_energy
from runtime_sim.contract.errors import DeviceProgramError, short_name
from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.plan import VgmPlan
from runtime_sim.contract.validation import validate_program
from runtime_sim.contract.vgm_layout import VgmLayout, vgm_region_bytes
from runtime_sim.machine.links import link_transfer_seconds
from runtime_sim.timing.timing_report import energy_fields, energy_lines
from schedules import template_for
from schedules.actions import action_metrics, vgm_actions


@dataclass(frozen=True)
class VgmTiming:
    """Time of one VGM operator by component (seconds) and its traffic (bytes)."""

    compute_s: float
    transfer_s: float
    uncontended_transfer_s: float
    epilogue_s: float
    bytes_moved: int
    waves: int
    tiles: int

    @property
    def time_s(self) -> float:
        return self.compute_s + self.transfer_s + self.epilogue_s

    @property
    def stall_s(self) -> float:
        """Transfer time lost to hot spots: home cores serving more than a core fetches."""
        return self.transfer_s - self.uncontended_transfer_s


def vgm_op_timing(expr: TensorExpr, plan: VgmPlan, hw: HardwareSpec,
                  multicast: bool = True) -> VgmTiming:
    """Simulate one VGM operator wave by wave and chunk by chunk on an all-to-all chip.

    Per chunk, every core fetches its input pieces and every home core serves its readers;
    a core's link serializes both directions' transfers (Elk §2.1), so the chunk's transfer
    takes the busiest link's bytes over the link bandwidth. A box several cores read in the
    same chunk is sent once by its home core when ``multicast`` (the IPU's exchange, as the
    all-to-all topology charges broadcasts); a core keeps the input boxes it already holds
    when the plan has ``reuse`` (:meth:`VgmLayout.traffic`). Compute uses the op template
    (matrix unit padded to its tile, T10 §4.3.1). After the last chunk each output tile goes
    home. Load, compute and store do not overlap: the load-compute-store paradigm (T10 §2.2)
    on a bulk-synchronous chip, where a core's exchange and compute phases alternate (the
    IPU's BSP model; the compute-shift steps are timed the same way).
    """
    layout = VgmLayout(expr, plan, hw.num_cores)
    template = template_for(expr.kind)
    out = len(expr.tensors) - 1
    main_inputs = [t for t in range(len(expr.inputs)) if t not in expr.epilogue_inputs]
    chunk_len = {a: layout.tile[a] for a in expr.axis_names}
    step_s = (template.subtask_cycles(expr, chunk_len, hw) + hw.sync_cycles) / hw.clock_hz
    compute_s = transfer_s = balanced_s = 0.0
    moved = 0
    held: dict[int, np.ndarray] | None = {} if layout.reuse else None
    for wave in range(layout.waves):
        origins = layout.tile_origins(wave)
        for chunk in layout.chunk_origins():
            fetched, served = layout.traffic(main_inputs, origins, chunk, held, multicast)
            transfer_s += _link_time(fetched, served, hw)
            balanced_s += _own_link_time(fetched, hw)
            moved += int(fetched.sum())
            compute_s += step_s
        reduce_zero = {a: 0 for a in layout.reduce}
        stored, homed = layout.traffic([out] + list(expr.epilogue_inputs), origins, reduce_zero,
                                       multicast=multicast)
        transfer_s += _link_time(stored, homed, hw)
        balanced_s += _own_link_time(stored, hw)
        moved += int(stored.sum())
    partition = {a: layout.tile[a] for a in layout.spatial}
    epilogue_s = layout.waves * template.epilogue_cycles(expr, partition, hw) / hw.clock_hz
    return VgmTiming(compute_s, transfer_s, balanced_s, epilogue_s, moved, layout.waves,
                     layout.num_tiles)


def _link_time(sent_or_received: np.ndarray, served: np.ndarray, hw: HardwareSpec) -> float:
    busiest = max(int(sent_or_received.max(initial=0)), int(served.max(initial=0)))
    return link_transfer_seconds(busiest, hw)


def _own_link_time(fetched: np.ndarray, hw: HardwareSpec) -> float:
    """The transfer if every core only waited for its own link (no home core a hot spot)."""
    return link_transfer_seconds(int(fetched.max(initial=0)), hw)


@dataclass(frozen=True)
class VgmReport:
    """End-to-end time of a model run load-compute-store on a VGM (no HBM: all on chip)."""

    total_s: float
    compute_s: float
    transfer_s: float
    stall_s: float
    num_ops: int
    vgm_bytes_per_core: int
    peak_sram_bytes_per_core: int
    fits: bool
    per_op: tuple[tuple[str, VgmTiming], ...]
    #: the run's actions that cost energy (:func:`schedules.actions.vgm_actions`)
    actions: ActionCounts = field(default_factory=ActionCounts)
    #: its energy (:func:`runtime_sim.contract.energy.run_energy`); ``None`` without a model
    energy: RunEnergy | None = None

    def to_dict(self) -> dict:
        return {
            "total_s": self.total_s, "compute_s": self.compute_s, "transfer_s": self.transfer_s,
            "stall_s": self.stall_s, "num_ops": self.num_ops,
            "vgm_bytes_per_core": self.vgm_bytes_per_core,
            "peak_sram_bytes_per_core": self.peak_sram_bytes_per_core, "fits": self.fits,
            **action_metrics(self.actions), **energy_fields(self.energy),
        }

    def table(self) -> str:
        """A few lines: the time, its parts, the VGM's SRAM and the energy line."""
        return "\n".join([
            f"VGM (load-compute-store) timing: {self.num_ops} ops  total {self.total_s * 1e6:.3f} us",
            f"  compute {self.compute_s * 1e6:.3f} us  transfer {self.transfer_s * 1e6:.3f} us  "
            f"stall {self.stall_s * 1e6:.3f} us",
            f"  VGM {self.vgm_bytes_per_core} B/core  peak SRAM {self.peak_sram_bytes_per_core} "
            f"B/core ({'fits' if self.fits else 'does not fit'})",
            *energy_lines(self.energy)])


def simulate_vgm_timing(programs, hw: HardwareSpec | None = None, multicast: bool = True) -> VgmReport:
    """Time every VGM operator of ``programs`` (regions in execution order), one after another
    (``multicast``: see :func:`vgm_op_timing`).

    Each operator's inputs are in the VGM when it starts and its output is stored there, so
    operators do not overlap; ``fits`` says whether the VGM region plus the largest working set
    fits a core's SRAM (the largest batch a VGM compiler can run).
    """
    programs = list(programs)
    if not programs and hw is None:
        raise DeviceProgramError("simulate_vgm_timing needs at least one program or a HardwareSpec")
    hw = hw or HardwareSpec.from_dict(programs[0].hardware)
    for program in programs:  # the program check the functional device makes too
        validate_program(program, hw)
    region = vgm_region_bytes(programs, hw.num_cores)
    per_op = []
    actions = ActionCounts()
    peak = region
    for program in programs:
        for op in program.ops:
            if not isinstance(op.plan, VgmPlan):
                raise DeviceProgramError(f"operator '{short_name(op.name)}' has a compute-shift "
                                         "plan, not a VGM plan")
            timing = vgm_op_timing(op.expr, op.plan, hw, multicast)
            layout = VgmLayout(op.expr, op.plan, hw.num_cores)
            peak = max(peak, region + layout.working_bytes_per_core() + hw.shift_buffer_bytes)
            per_op.append((op.name, timing))
            actions = actions + vgm_actions(layout, hw, timing.bytes_moved)
    compute = sum(t.compute_s + t.epilogue_s for _, t in per_op)
    transfer = sum(t.transfer_s for _, t in per_op)
    stall = sum(t.stall_s for _, t in per_op)
    total = compute + transfer
    return VgmReport(total, compute, transfer, stall, len(per_op), region, peak,
                     peak <= hw.sram_bytes_per_core, tuple(per_op), actions,
                     run_energy(actions, hw.energy_table(), total, cores=hw.num_cores,
                                chips=hw.num_chips))
