"""The ``hardware-presets`` and ``energy-presets`` directives: tables of every preset of
:mod:`runtime_sim.contract.presets` (their figures; their per-action energies).

Built from the presets themselves when the documentation is built, so the page never repeats a
number by hand; each row's source is the preset's own ``notes`` (the paper or vendor document
its numbers come from), and each energy marked assumed carries a ``*`` and its reason.
"""

from __future__ import annotations

from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

from rst_table import parse_table

_HEADER = ("preset", "chips", "cores", "SRAM per core", "clock", "peak matrix compute per dtype",
           "matrix energy per FLOP", "core link", "chip-to-chip", "HBM", "host link per chip",
           "board power per chip", "topology", "source", "assumed (not sourced)")
_ENERGY_HEADER = ("preset", "matrix pJ/FLOP", "vector pJ/FLOP", "SRAM read / write pJ/B",
                  "on-chip link pJ/B", "chip-to-chip pJ/B", "HBM / DRAM pJ/B", "host pJ/B",
                  "static W per core / per chip", "board power per chip",
                  "assumed energies (marked \\*)")


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
        if value >= scale:
            return f"{value / scale:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"


def _number(value: float) -> str:
    return f"{value:.3g}"


def _matrix_energy(spec) -> str:
    """The matrix unit's picojoules per FLOP of each dtype the chip computes."""
    table = spec.energy_table()
    return ", ".join(f"{d} {_number(table.matrix_pj_for(d))}" for d in spec.dtypes)


def _board_power(spec) -> str:
    return f"{spec.board_power_w:.4g} W" if spec.board_power_w else "not known"


def energy_row(spec) -> list[str]:
    """One row of the ``energy-presets`` table: each energy field of ``spec``, a ``*`` beside
    each one marked assumed, and the reasons of the marks in the last column."""
    from runtime_sim.contract.preset_energies import ENERGY_FIELDS

    marks = {name: why for name, why in spec.assumed if name in ENERGY_FIELDS}

    def cell(text: str, *fields: str) -> str:
        return text + ("\\*" if any(f in marks for f in fields) else "")

    return [f"``{spec.name}``",
            cell(_matrix_energy(spec), "matrix_pj_per_flop", "matrix_pj_per_flop_by_dtype"),
            cell(_number(spec.vector_pj_per_flop), "vector_pj_per_flop"),
            cell(f"{_number(spec.sram_read_pj_per_byte)} / {_number(spec.sram_write_pj_per_byte)}",
                 "sram_read_pj_per_byte", "sram_write_pj_per_byte"),
            cell(_number(spec.link_pj_per_byte) + (" per hop" if spec.topology == "mesh"
                                                   else " through the exchange"),
                 "link_pj_per_byte"),
            cell(_number(spec.inter_chip_pj_per_byte), "inter_chip_pj_per_byte"),
            cell(_number(spec.hbm_pj_per_byte), "hbm_pj_per_byte"),
            cell(_number(spec.host_pj_per_byte), "host_pj_per_byte"),
            cell(f"{_number(spec.static_w_per_core)} / {_number(spec.static_w_per_chip)}",
                 "static_w_per_core", "static_w_per_chip"),
            cell(_board_power(spec), "board_power_w"),
            "; ".join(f"``{name}``: {why}" for name, why in marks.items()) or "--"]


def _row(spec) -> list[str]:
    # peak: every core's matrix unit busy every cycle (what the compiler's cost model assumes),
    # at each dtype's rate
    peak = ", ".join(f"{d} {_si(spec.peak_matrix_flops_for(d), 'FLOP/s')}" for d in spec.dtypes)
    hbm = (f"{_si(spec.hbm_bandwidth, 'B/s')}, {spec.hbm_controllers} controllers"
           if spec.hbm_bandwidth else "none")
    if spec.hbm_bytes_per_chip:
        hbm += f", {spec.hbm_bytes_per_chip / 2**30:,.4g} GiB per chip"
    inter_chip = _si(spec.inter_chip_bandwidth, "B/s") if spec.num_chips > 1 else "--"
    topology = spec.topology
    if topology == "mesh":  # the grid of one chip, its wrap links, where its controllers attach
        grid = spec.mesh_grid()
        topology = f"{'torus' if grid.torus else 'mesh'} {grid.rows} x {grid.cols}"
        if spec.hbm_controllers:
            topology += (", HBM on the edges" if grid.controllers is None
                         else ", HBM controllers as NoC nodes")
    return [f"``{spec.name}``", str(spec.num_chips), f"{spec.num_cores:,}",
            f"{spec.sram_bytes_per_core / 1024:,.4g} KiB", _si(spec.clock_hz, "Hz"),
            peak, _matrix_energy(spec) + " pJ", _si(spec.link_bandwidth, "B/s"), inter_chip, hbm,
            _si(spec.host_bandwidth, "B/s"), _board_power(spec), topology, spec.notes,
            "; ".join(f"``{name}``: {why}" for name, why in spec.assumed) or "--"]


class HardwarePresets(SphinxDirective):
    """``.. hardware-presets::`` -- one row per name of ``PRESET_NAMES``."""

    def run(self):
        from runtime_sim.contract.presets import PRESET_NAMES, preset

        rows = [_row(preset(name)) for name in PRESET_NAMES]
        return parse_table(self, "The presets of runtime_sim.contract.presets", _HEADER, rows)


class EnergyPresets(SphinxDirective):
    """``.. energy-presets::`` -- the per-action energies of every name of ``PRESET_NAMES``."""

    def run(self):
        from runtime_sim.contract.presets import PRESET_NAMES, preset

        rows = [energy_row(preset(name)) for name in PRESET_NAMES]
        return parse_table(self, "Per-action energies of the presets (picojoules; watts)",
                           _ENERGY_HEADER, rows)


def setup(app: Sphinx) -> dict:
    app.add_directive("hardware-presets", HardwarePresets)
    app.add_directive("energy-presets", EnergyPresets)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
