"""The per-action energies of the hardware presets, each derived from a cited figure.

:mod:`runtime_sim.contract.presets` takes the energy fields of every preset from here (the
energy model itself: :mod:`runtime_sim.contract.energy`). No vendor publishes the energy of
an IPU or Tensix action, so the dynamic energies are built from three published sources:

* the 45 nm energies of Horowitz, "Computing's energy problem (and what we can do about it)",
  ISSCC 2014 (FP16 add 0.4 pJ, multiply 1.1 pJ; FP32 add 0.9 pJ, multiply 3.7 pJ; a 64-bit
  SRAM read of 10 pJ at 8 KB, 20 pJ at 32 KB, 100 pJ at 1 MB; a 64-bit DRAM access of
  1.3-2.6 nJ);
* scaled from 45 nm to each chip's process by the energy fit of Stillmaker & Baas, "Scaling
  equations for the accurate prediction of CMOS device performance from 180 nm to 7 nm",
  Integration 58 (2017) 74-81 (:func:`stillmaker_energy_factor`);
* the off-chip and on-chip link energies of measured circuits (cited per constant below).

What no document gives (a chip's supply voltage, its SRAM banking, its wire lengths, its static
power, the energy of a write) is named, with the reason for its value, in the ``assumed``
marks :func:`ipu_energies` and :func:`tenstorrent_energies` return beside the values.
"""

from __future__ import annotations

import math
from typing import Any

from runtime_sim.contract.energy import ENERGY_FIELDS

__all__ = ["stillmaker_energy_factor", "sram_read_pj_per_byte_45nm", "ipu_energies",
           "tenstorrent_energies", "ENERGY_FIELDS"]

# -- Horowitz, ISSCC 2014 (45 nm) -----------------------------------------------------------
_FP16_ADD_PJ, _FP16_MUL_PJ = 0.4, 1.1
_FP32_ADD_PJ, _FP32_MUL_PJ = 0.9, 3.7
#: (bytes, pJ per 64-bit read) of the table's three SRAM sizes.
_SRAM_64BIT_READ_PJ = ((8 * 1024, 10.0), (32 * 1024, 20.0), (1024 * 1024, 100.0))
#: the low end of the table's DRAM access, 1.3 nJ per 64 bits.
_DRAM_64BIT_PJ = 1300.0
_HOROWITZ_NODE_NM = 45

# -- Stillmaker & Baas 2017: energy per operation E(V) = a V^2 + b V + c per node ------------
# Their fit coefficients of the nodes used here, read from a public transcription of the
# paper's table (its 65 nm row, 3.755 / -4.398 / 1.975, is the one the authors' erratum to
# Section 4.2.1 works an example through); a node between two rows is interpolated linearly
# between them.
_STILLMAKER_ENERGY_FIT = {45: (1.103, -0.362, 0.2767), 14: (0.2363, -0.09675, 0.02239),
                          10: (0.2068, -0.09311, 0.02375), 7: (0.1776, -0.09097, 0.02447)}
#: One supply voltage at both ends: no preset's chip publishes its core voltage, so only the
#: process changes (marked assumed on every preset).
_SCALING_VDD = 0.9

# -- links ------------------------------------------------------------------------------------
#: Park, Qazi, Peh, Chandrakasan, "40.4fJ/bit/mm low-swing on-chip signaling with self-resetting
#: logic repeaters embedded within a mesh NoC in 45nm SOI CMOS", DATE 2013: a measured NoC link.
_WIRE_PJ_PER_BIT_MM = 0.0404
#: A Tensix tile holds 1.5 MB of SRAM besides its FPU, SFPU and five RISC-V cores: 2 mm is the
#: assumed hop (no die or tile size is published; marked assumed on the Tenstorrent presets).
_TENSIX_HOP_MM = 2.0
#: IBM, "A 1.4-pJ/b, power-scalable 16x12-Gb/s source-synchronous I/O with DFE receiver in 32nm
#: SOI CMOS" (research.ibm.com): 1.9 pJ/b over 20" of Megtron-6 board trace, the board-level
#: reach of a chip-to-chip or host link.
_BOARD_LINK_PJ_PER_BIT = 1.9
#: O'Connor et al., "Fine-grained DRAM: energy-efficient DRAM for extreme bandwidth systems",
#: MICRO 2017: HBM2 at about 3.9 pJ per bit.
_HBM2_PJ_PER_BIT = 3.9

#: Static power (leakage, clock tree, idle PHYs) as a share of the rated board power: no
#: vendor publishes an idle or leakage figure for these chips (marked assumed on every preset).
_STATIC_SHARE_OF_BOARD = 0.25


def stillmaker_energy_factor(node_nm: float, vdd: float = _SCALING_VDD) -> float:
    """Energy per operation at ``node_nm`` relative to 45 nm, at one supply voltage ``vdd``.

    Stillmaker & Baas (Integration 2017) fit each node's energy per operation as
    ``a V^2 + b V + c``; the factor is the target node's fit over the 45 nm fit (the paper's
    recipe for scaling a measured energy between nodes). Nodes between two fitted rows are
    interpolated linearly; 7 nm is the smallest node the paper fits.
    """
    nodes = sorted(_STILLMAKER_ENERGY_FIT)
    if not nodes[0] <= node_nm <= nodes[-1]:
        raise ValueError(f"no Stillmaker & Baas energy fit for {node_nm} nm "
                         f"(fitted here: {nodes[0]}-{nodes[-1]} nm)")

    def fit(node: int) -> float:
        a, b, c = _STILLMAKER_ENERGY_FIT[node]
        return a * vdd * vdd + b * vdd + c

    below = max(n for n in nodes if n <= node_nm)
    above = min(n for n in nodes if n >= node_nm)
    share = 0.0 if above == below else (node_nm - below) / (above - below)
    energy = fit(below) * (1 - share) + fit(above) * share
    return energy / fit(_HOROWITZ_NODE_NM)


def sram_read_pj_per_byte_45nm(size_bytes: int) -> float:
    """Picojoules per byte read from an SRAM of ``size_bytes`` at 45 nm: Horowitz's 64-bit
    read energies (8 KB, 32 KB, 1 MB), interpolated (and extrapolated past 1 MB) linearly in
    log(energy) against log(size), the power law between the table's points."""
    (s0, e0), (s1, e1) = ((_SRAM_64BIT_READ_PJ[0], _SRAM_64BIT_READ_PJ[1])
                          if size_bytes <= _SRAM_64BIT_READ_PJ[1][0]
                          else (_SRAM_64BIT_READ_PJ[1], _SRAM_64BIT_READ_PJ[2]))
    slope = math.log(e1 / e0) / math.log(s1 / s0)
    return e0 * (size_bytes / s0) ** slope / 8.0


def _fma_pj_per_flop(mul_pj: float, add_pj: float) -> float:
    # a multiply-accumulate is two FLOPs: one multiply and one add
    return (mul_pj + add_pj) / 2.0


def _common(node_nm: float, sram_bytes: int, board_power_w: float, cores_per_chip: int,
            link_mm: float) -> dict[str, Any]:
    """The fields every preset derives the same way (one rule, one place)."""
    scale = stillmaker_energy_factor(node_nm)
    sram = sram_read_pj_per_byte_45nm(sram_bytes) * scale
    return dict(
        matrix_pj_per_flop=_fma_pj_per_flop(_FP16_MUL_PJ, _FP16_ADD_PJ) * scale,
        vector_pj_per_flop=_fma_pj_per_flop(_FP32_MUL_PJ, _FP32_ADD_PJ) * scale,
        sram_read_pj_per_byte=sram, sram_write_pj_per_byte=sram,
        link_pj_per_byte=8 * _WIRE_PJ_PER_BIT_MM * link_mm,
        inter_chip_pj_per_byte=8 * _BOARD_LINK_PJ_PER_BIT,
        host_pj_per_byte=8 * _BOARD_LINK_PJ_PER_BIT,
        static_w_per_core=_STATIC_SHARE_OF_BOARD * board_power_w / cores_per_chip,
        static_w_per_chip=0.0,
        board_power_w=board_power_w,
    )


_COMMON_ASSUMED = {
    "sram_write_pj_per_byte": "Horowitz gives SRAM reads only: a write is priced as a read",
    "static_w_per_core": "no idle or leakage figure is published: a quarter of the rated board "
                         "power, spread over the chip's cores",
    "static_w_per_chip": "0: the whole static power is in static_w_per_core (leakage follows "
                         "the cores' area); nothing is split off for the chip",
    "inter_chip_pj_per_byte": "the chip-to-chip link's own energy is not published: a measured "
                              "board-level SerDes (IBM 32 nm, 1.9 pJ/b over 20 inches)",
    "host_pj_per_byte": "the PCIe PHY's energy is not published: the same board-level SerDes "
                        "figure (IBM 32 nm, 1.9 pJ/b over 20 inches)",
}


def _scaling_assumed(node_nm: float, node_note: str) -> dict[str, str]:
    why = (f"Horowitz's 45 nm figure x{stillmaker_energy_factor(node_nm):.3f} (Stillmaker & "
           f"Baas to {node_note}, at {_SCALING_VDD} V: the chip's voltage is not published)")
    return {"matrix_pj_per_flop": why, "vector_pj_per_flop": why}


def ipu_energies(board_power_w: float, *,
                 mesh: bool = False) -> tuple[dict[str, Any], dict[str, str]]:
    """The energy fields of an IPU Mk2 (GC200) preset, and their ``assumed`` marks.

    Process: TSMC 7 nm (Graphcore's GC200 announcement: 59.4 billion transistors on an
    823 mm2 die, TSMC N7). ``board_power_w``: the rated power per chip (the C600 card's
    185 W TDP, Graphcore's C600 datasheet). ``mesh``: link energy per hop of a mesh over the
    die (one tile pitch) rather than per byte through the all-to-all exchange.
    """
    die_mm2, tiles = 823.0, 1472
    edge_mm = math.sqrt(die_mm2)
    # all-to-all: a byte crosses the exchange from one tile to another; the mean Manhattan
    # distance between two uniform points of a square of side L is 2L/3. Mesh: one tile pitch.
    link_mm = math.sqrt(die_mm2 / tiles) if mesh else 2.0 * edge_mm / 3.0
    fields = _common(7, 624 * 1024, board_power_w, tiles, link_mm)
    scale = stillmaker_energy_factor(7)
    # float32 on the AMP unit: Horowitz's FP32 multiply and add; float16 (and bfloat16, not an
    # IPU format, see the dtypes mark) at the FP16 figures of matrix_pj_per_flop
    fields["matrix_pj_per_flop_by_dtype"] = {
        "float32": _fma_pj_per_flop(_FP32_MUL_PJ, _FP32_ADD_PJ) * scale}
    # Elk's HBM3E (used by the -hbm presets; priced on the others only if HBM is added)
    fields["hbm_pj_per_byte"] = 8 * _HBM2_PJ_PER_BIT
    assumed = {
        **_COMMON_ASSUMED, **_scaling_assumed(7, "TSMC 7 nm"),
        "matrix_pj_per_flop_by_dtype": "float32: Horowitz's FP32 multiply and add, scaled to 7 nm "
                                       "like float16 (the AMP unit's energy is not published)",
        "sram_read_pj_per_byte": "the tile SRAM's banking is not published: Horowitz's 64-bit "
                                 "reads interpolated (log-log) to the whole 624 KiB, scaled to "
                                 "7 nm",
        "link_pj_per_byte": (
            "the exchange's wiring is not published: Park et al.'s 45 nm NoC link (40.4 fJ/bit/mm)"
            + (" over one tile pitch of the 823 mm2 die (0.75 mm) per hop" if mesh else
               " over 2/3 of the 823 mm2 die's edge, the mean tile-to-tile distance")),
        "hbm_pj_per_byte": "no HBM3E energy per bit was found: HBM2's 3.9 pJ/bit (O'Connor et al., "
                           "MICRO 2017) kept, an upper bound for a newer generation",
    }
    return fields, assumed


def tenstorrent_energies(node_nm: float, node_note: str, *, board_power_w: float,
                         cores_per_chip: int) -> tuple[dict[str, Any], dict[str, str]]:
    """The energy fields of a Tenstorrent preset (1.5 MB of L1 per Tensix), and their marks.

    ``node_nm``: the process (Wormhole 12 nm, Blackhole 6 nm, as Tenstorrent's Dev Day 2025
    comparison lists them; 6 nm is priced at the fit's last node, 7 nm). ``board_power_w``:
    the board's total board power (n150 160 W, p150 300 W: docs.tenstorrent.com specifications).
    """
    fields = _common(max(node_nm, 7), 1499136, board_power_w, cores_per_chip, _TENSIX_HOP_MM)
    # every dtype multiplies on the same array in fidelity phases (MatrixUnit.md): one figure
    fields["matrix_pj_per_flop_by_dtype"] = {}
    fields["hbm_pj_per_byte"] = _DRAM_64BIT_PJ / 8  # GDDR6: see the mark
    assumed = {
        **_COMMON_ASSUMED, **_scaling_assumed(max(node_nm, 7), node_note),
        "matrix_pj_per_flop": "Horowitz's FP16 multiply and add scaled to the node, for every "
                              "dtype: the Tensix FPU's staged multiplier (fidelity phases) has no "
                              "published energy",
        "matrix_pj_per_flop_by_dtype": "none: every dtype runs on the same multiplier array",
        "sram_read_pj_per_byte": "the L1's banking is not published: Horowitz's 64-bit reads "
                                 "extrapolated (log-log) to 1.43 MiB, scaled to the node",
        "link_pj_per_byte": f"no Tensix tile size is published: Park et al.'s 45 nm NoC link "
                            f"(40.4 fJ/bit/mm) over a {_TENSIX_HOP_MM:g} mm hop; routers not "
                            "counted",
        "hbm_pj_per_byte": "no GDDR6 energy per bit was verified: Horowitz's DRAM access (1.3 nJ "
                           "per 64 bits, its low end), an upper bound for GDDR6",
    }
    return fields, assumed
