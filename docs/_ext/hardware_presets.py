"""The ``hardware-presets`` directive: a table of every preset of :mod:`runtime_sim.contract.presets`.

Built from the presets themselves when the documentation is built, so the page never repeats a
number by hand; each row's source is the preset's own ``notes`` (the paper or vendor document
its numbers come from).
"""

from __future__ import annotations

from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

from rst_table import parse_table

_HEADER = ("preset", "chips", "cores", "SRAM per core", "clock", "peak matrix compute per dtype",
           "core link", "chip-to-chip", "HBM", "host link per chip", "topology", "source",
           "assumed (not sourced)")


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
        if value >= scale:
            return f"{value / scale:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"


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
            peak, _si(spec.link_bandwidth, "B/s"), inter_chip, hbm,
            _si(spec.host_bandwidth, "B/s"), topology, spec.notes,
            "; ".join(f"``{name}``: {why}" for name, why in spec.assumed) or "--"]


class HardwarePresets(SphinxDirective):
    """``.. hardware-presets::`` -- one row per name of ``PRESET_NAMES``."""

    def run(self):
        from runtime_sim.contract.presets import PRESET_NAMES, preset

        rows = [_row(preset(name)) for name in PRESET_NAMES]
        return parse_table(self, "The presets of runtime_sim.contract.presets", _HEADER, rows)


def setup(app: Sphinx) -> dict:
    app.add_directive("hardware-presets", HardwarePresets)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
