"""The energy model: energy per action times the actions a run performs, plus static power.

The one definition of a run's energy, shared by both executors (each counts the actions it
already knows: :class:`ActionCounts`), the GPU reference and the design-space reports. It
follows the architecture community's action-based estimators (Accelergy, Timeloop: energy per
action by component, times action counts, plus leakage over the run's time); the per-action
energies of a chip are fields of its :class:`~runtime_sim.contract.hardware.HardwareSpec`
(``*_pj_per_flop``, ``*_pj_per_byte``, ``static_w_per_core``, ``static_w_per_chip``,
``board_power_w``), each preset's cited in :mod:`runtime_sim.contract.presets`.

What is counted, and where the action's energy comes from:

* a FLOP of the matrix unit, at the rate of its operands' dtype (``matrix_pj_per_flop``,
  ``matrix_pj_per_flop_by_dtype``), and a FLOP of the vector unit (``vector_pj_per_flop``);
* a byte read from and written to a core's SRAM (``sram_read_pj_per_byte``,
  ``sram_write_pj_per_byte``): the operands a sub-task reads, the results it writes, and both
  ends of every transfer (the sender reads, the receiver writes);
* a byte over the on-chip interconnect (``link_pj_per_byte``): per hop on a mesh (a byte
  crossing four routers pays four times), per byte through the exchange on an all-to-all chip;
* a byte between chips (``inter_chip_pj_per_byte``), read from HBM or DRAM
  (``hbm_pj_per_byte``), or over the host link (``host_pj_per_byte``);
* static power (leakage, clocks, idle PHYs): ``static_w_per_core`` of every core and
  ``static_w_per_chip`` of every chip, for the whole run's time.

A chip without per-action energies (every field 0: a hardware file that gives none) has no
energy model; :func:`run_energy` then returns ``None`` and the reports say so rather than
printing 0 J.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Mapping

__all__ = ["ActionCounts", "EnergyTable", "RunEnergy", "run_energy", "ENERGY_COMPONENTS",
           "ENERGY_FIELDS", "ENERGY_PJ_FIELDS", "STATIC_POWER_FIELDS"]

PJ = 1e-12

#: The components a run's energy is broken down into, in the order reports print them.
ENERGY_COMPONENTS = ("matrix", "vector", "sram", "link", "inter_chip", "hbm", "host", "static")


@dataclass(frozen=True)
class EnergyTable:
    """Per-action energies of one system (picojoules; static power in watts).

    Built from a chip's fields by :meth:`HardwareSpec.energy_table
    <runtime_sim.contract.hardware.HardwareSpec.energy_table>` (and from a GPU's by the GPU
    reference), so that one formula (:func:`run_energy`) prices every system.
    """

    matrix_pj_per_flop: float = 0.0
    matrix_pj_per_flop_by_dtype: tuple[tuple[str, float], ...] = ()
    vector_pj_per_flop: float = 0.0
    sram_read_pj_per_byte: float = 0.0
    sram_write_pj_per_byte: float = 0.0
    link_pj_per_byte: float = 0.0
    inter_chip_pj_per_byte: float = 0.0
    hbm_pj_per_byte: float = 0.0
    host_pj_per_byte: float = 0.0
    static_w_per_core: float = 0.0
    static_w_per_chip: float = 0.0
    #: rated power of one chip's board (W); 0: not known. A sanity bound, never a cost.
    board_power_w: float = 0.0

    @property
    def modelled(self) -> bool:
        """Whether any action or static power has an energy (a chip without one has no model;
        the board power is a bound, not an energy)."""
        return any(getattr(self, name) > 0 for name in ENERGY_PJ_FIELDS + STATIC_POWER_FIELDS) \
            or any(v > 0 for _, v in self.matrix_pj_per_flop_by_dtype)

    def matrix_pj_for(self, dtype: str | None) -> float:
        """Energy of one matrix-unit FLOP on operands of ``dtype``: its entry of
        ``matrix_pj_per_flop_by_dtype``, else ``matrix_pj_per_flop``."""
        for listed, pj in self.matrix_pj_per_flop_by_dtype:
            if listed == dtype:
                return pj
        return self.matrix_pj_per_flop


@dataclass(frozen=True)
class ActionCounts:
    """The actions of a run (or of one operator) that cost energy, as an executor counts them.

    ``matrix_flops`` maps a dtype to the FLOPs the matrix unit ran on operands of that dtype
    (``None``: the dtype was not known, priced at ``matrix_pj_per_flop``). ``link_byte_hops``
    is byte-hops on a mesh and bytes through the exchange on an all-to-all chip (see the
    module docstring; not the metric ``link_bytes``, the bytes cores received). Counts add
    (:meth:`__add__`), so a run's counts are the sum of its operators'.
    """

    matrix_flops: tuple[tuple[str | None, float], ...] = ()
    vector_flops: float = 0.0
    sram_read_bytes: float = 0.0
    sram_write_bytes: float = 0.0
    link_byte_hops: float = 0.0
    inter_chip_bytes: float = 0.0
    hbm_bytes: float = 0.0
    host_bytes: float = 0.0

    @staticmethod
    def of(matrix_flops: Mapping[str | None, float] | None = None, **counts: float) -> "ActionCounts":
        """Counts from a ``{dtype: FLOPs}`` mapping and the byte counts by name."""
        pairs = tuple(sorted(((d, float(f)) for d, f in (matrix_flops or {}).items() if f),
                             key=lambda kv: str(kv[0])))
        return ActionCounts(matrix_flops=pairs, **{k: float(v) for k, v in counts.items()})

    def __add__(self, other: "ActionCounts") -> "ActionCounts":
        flops: dict[str | None, float] = dict(self.matrix_flops)
        for dtype, f in other.matrix_flops:
            flops[dtype] = flops.get(dtype, 0.0) + f
        return ActionCounts.of(flops, **{name: getattr(self, name) + getattr(other, name)
                                         for name in _COUNT_FIELDS})

    @property
    def total_matrix_flops(self) -> float:
        return sum(f for _, f in self.matrix_flops)

    def to_dict(self) -> dict[str, float]:
        return {"matrix_flops": self.total_matrix_flops,
                **{name: getattr(self, name) for name in _COUNT_FIELDS}}


#: The counts besides the matrix FLOPs (which are per dtype), in declaration order.
_COUNT_FIELDS = tuple(f.name for f in fields(ActionCounts) if f.name != "matrix_flops")
#: Every energy field of a chip (:class:`~runtime_sim.contract.hardware.HardwareSpec` has
#: each under the same name), in declaration order: the documentation's table follows it.
ENERGY_FIELDS = tuple(f.name for f in fields(EnergyTable))
#: The picojoule-per-action fields (the per-dtype map aside) and the static power fields.
ENERGY_PJ_FIELDS = tuple(n for n in ENERGY_FIELDS if "_pj_per_" in n and not n.endswith("_by_dtype"))
STATIC_POWER_FIELDS = ("static_w_per_core", "static_w_per_chip")


@dataclass(frozen=True)
class RunEnergy:
    """A run's energy: joules by component (:data:`ENERGY_COMPONENTS`), their total, the
    average power over the run's time and the system's rated board power.

    ``over_board_power`` is true when the average power exceeds the rated power of the
    system's boards (``board_power_w`` per chip x chips; never when it is not known): the
    per-action energies are then too high for this chip, and every report warns.
    """

    energy_j: float
    seconds: float
    breakdown_j: dict[str, float] = field(default_factory=dict)
    board_power_w: float = 0.0

    @property
    def average_power_w(self) -> float:
        return self.energy_j / self.seconds if self.seconds > 0 else 0.0

    @property
    def over_board_power(self) -> bool:
        return self.board_power_w > 0 and self.average_power_w > self.board_power_w

    def per(self, count: float) -> float:
        """Joules per item (token, sample) of a run that processed ``count`` of them."""
        return self.energy_j / count if count > 0 else 0.0

    def warning(self) -> str:
        """One sentence when the average power exceeds the rated board power, else ``""``."""
        if not self.over_board_power:
            return ""
        return (f"average power {self.average_power_w:.1f} W exceeds the system's rated board "
                f"power {self.board_power_w:.1f} W: the per-action energies overstate this chip")

    def to_dict(self) -> dict[str, object]:
        return {"energy_j": self.energy_j, "average_power_w": self.average_power_w,
                "energy_breakdown_j": dict(self.breakdown_j), "board_power_w": self.board_power_w}


def run_energy(counts: ActionCounts, table: EnergyTable, seconds: float, *, cores: int,
               chips: int) -> RunEnergy | None:
    """The energy of a run that performed ``counts`` in ``seconds`` on ``cores`` cores of
    ``chips`` chips, priced by ``table``; ``None`` when the table models no energy.

    Dynamic energy is each action's count times its energy; static energy is the static
    power of every core and chip of the system (idle ones leak too) over ``seconds``.
    """
    if not table.modelled:
        return None
    matrix = sum(f * table.matrix_pj_for(d) for d, f in counts.matrix_flops) * PJ
    parts = {
        "matrix": matrix,
        "vector": counts.vector_flops * table.vector_pj_per_flop * PJ,
        "sram": (counts.sram_read_bytes * table.sram_read_pj_per_byte
                 + counts.sram_write_bytes * table.sram_write_pj_per_byte) * PJ,
        "link": counts.link_byte_hops * table.link_pj_per_byte * PJ,
        "inter_chip": counts.inter_chip_bytes * table.inter_chip_pj_per_byte * PJ,
        "hbm": counts.hbm_bytes * table.hbm_pj_per_byte * PJ,
        "host": counts.host_bytes * table.host_pj_per_byte * PJ,
        "static": (cores * table.static_w_per_core + chips * table.static_w_per_chip) * seconds,
    }
    return RunEnergy(energy_j=sum(parts.values()), seconds=float(seconds), breakdown_j=parts,
                     board_power_w=table.board_power_w * chips)
