"""The presets' per-action energies: their derivation from the cited figures, every field
cited or marked assumed, and a peak-power check against each board's rated power."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest

from runtime_sim.contract.energy import ActionCounts, run_energy
from runtime_sim.contract.hardware import HardwareSpec
from runtime_sim.contract.preset_energies import (
    ENERGY_FIELDS,
    sram_read_pj_per_byte_45nm,
    stillmaker_energy_factor,
)
from runtime_sim.contract.hardware_files import load_hardware
from runtime_sim.contract.presets import PRESET_NAMES, preset, small_chip

ROOT = Path(__file__).resolve().parents[1]

#: element bytes of the dtypes the presets compute
_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}


def test_stillmaker_factor_is_the_ratio_of_the_papers_fits() -> None:
    """E(V) = a V^2 + b V + c per node (Stillmaker & Baas 2017), evaluated here by hand at 0.9 V."""
    e45 = 1.103 * 0.81 - 0.362 * 0.9 + 0.2767
    e7 = 0.1776 * 0.81 - 0.09097 * 0.9 + 0.02447
    assert stillmaker_energy_factor(45) == pytest.approx(1.0)
    assert stillmaker_energy_factor(7) == pytest.approx(e7 / e45)
    factors = [stillmaker_energy_factor(node) for node in (7, 12, 14)]
    assert 0.09 < factors[0] < factors[1] < factors[2] < 0.2
    with pytest.raises(ValueError, match="5 nm"):
        stillmaker_energy_factor(5)


def test_sram_energy_passes_through_horowitzs_points() -> None:
    # Horowitz ISSCC 2014: 64-bit reads of 10, 20 and 100 pJ at 8 KB, 32 KB and 1 MB
    for size, pj in ((8 * 1024, 10.0), (32 * 1024, 20.0), (1024 * 1024, 100.0)):
        assert sram_read_pj_per_byte_45nm(size) == pytest.approx(pj / 8)
    # log-log between the points: monotone, and below the larger point's energy
    assert 20 / 8 < sram_read_pj_per_byte_45nm(624 * 1024) < 100 / 8


def test_ipu_energies_are_horowitzs_scaled_to_7nm() -> None:
    hw, scale = preset("ipu-mk2"), stillmaker_energy_factor(7)
    assert hw.matrix_pj_per_flop == pytest.approx((1.1 + 0.4) / 2 * scale)  # FP16 multiply-add
    assert hw.energy_table().matrix_pj_for("float32") == pytest.approx((3.7 + 0.9) / 2 * scale)
    assert hw.energy_table().matrix_pj_for("bfloat16") == hw.matrix_pj_per_flop
    assert hw.hbm_pj_per_byte == pytest.approx(8 * 3.9)  # O'Connor et al.'s HBM2 per bit
    assert hw.board_power_w == 185.0  # the C600 card's TDP
    # the mesh preset pays per hop (a tile pitch), the exchange per byte (2/3 of the die edge)
    mesh, pod = preset("ipu-pod4-hbm-mesh"), preset("ipu-pod4-hbm")
    assert mesh.link_pj_per_byte / pod.link_pj_per_byte == pytest.approx(
        math.sqrt(823 / 1472) / (2 * math.sqrt(823) / 3))
    assert pod.board_power_w == pytest.approx(185.0 + 4e12 * 8 * 3.9e-12)  # + its HBM3E at 4 TB/s


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_every_energy_field_is_cited_or_marked_assumed(name: str) -> None:
    hw = preset(name)
    assert hw.energy_table().modelled
    for field_name in ENERGY_FIELDS:
        value = getattr(hw, field_name)
        given = bool(value) and (not isinstance(value, tuple) or any(v for _, v in value))
        assert given or field_name in hw.assumed_fields, (name, field_name)
    assert small_chip(4).energy_table() == preset("ipu-mk2").energy_table()  # it inherits them


def peak_power_w(hw: HardwareSpec) -> float:
    """Watts of the whole system with every core's matrix unit at its peak on the dtype that
    draws the most, reading its operands from SRAM and writing its results there, plus static.

    Per matrix-unit tile (m, k, n): 2mkn FLOPs read (mk + kn) elements and write mn, a rough
    floor on SRAM traffic (a unit that re-read its operands would draw more)."""
    m, k, n = hw.matrix_tile
    table, worst = hw.energy_table(), 0.0
    for dtype in hw.dtypes:
        flops = hw.peak_matrix_flops_for(dtype)
        per_flop = _ITEMSIZE[dtype] / (2 * m * k * n)
        watts = flops * 1e-12 * (table.matrix_pj_for(dtype)
                                 + per_flop * (m * k + k * n) * hw.sram_read_pj_per_byte
                                 + per_flop * m * n * hw.sram_write_pj_per_byte)
        worst = max(worst, watts)
    return worst + hw.num_cores * hw.static_w_per_core + hw.num_chips * hw.static_w_per_chip


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_peak_matrix_power_stays_below_the_boards(name: str) -> None:
    hw = preset(name)
    if not hw.board_power_w:
        assert "board_power_w" in hw.assumed_fields  # a chip never built: no board to bound it
        return
    assert peak_power_w(hw) < hw.board_power_w * hw.num_chips
    # and the check catches a preset whose energies overstate the chip tenfold
    bloated = hw.with_overrides(sram_read_pj_per_byte=10 * hw.sram_read_pj_per_byte,
                                matrix_pj_per_flop=10 * hw.matrix_pj_per_flop)
    assert peak_power_w(bloated) > bloated.board_power_w * bloated.num_chips


def test_a_run_is_priced_by_the_preset() -> None:
    """One FLOP of each kind and one byte of each action, for one second, on one IPU."""
    hw = preset("ipu-mk2")
    counts = ActionCounts.of({"float16": 1e12}, vector_flops=1e12, sram_read_bytes=1e12,
                             sram_write_bytes=1e12, link_byte_hops=1e12, host_bytes=1e12)
    energy = run_energy(counts, hw.energy_table(), 1.0, cores=hw.num_cores, chips=1)
    expected = (hw.matrix_pj_per_flop + hw.vector_pj_per_flop + hw.sram_read_pj_per_byte
                + hw.sram_write_pj_per_byte + hw.link_pj_per_byte + hw.host_pj_per_byte)
    assert energy.breakdown_j["static"] == pytest.approx(0.25 * 185.0)
    assert energy.energy_j == pytest.approx(expected + 0.25 * 185.0)
    assert not energy.over_board_power


def test_the_energy_page_states_the_scaling_factors_the_code_applies() -> None:
    """docs/energy.md quotes the 7 nm and 12 nm factors; they are the function's."""
    text = (ROOT / "docs" / "energy.md").read_text()
    quoted = re.search(r"the ratio scales every arithmetic and SRAM figure: ([0-9.]+) for the IPU "
                       r"Mk2\s+\(TSMC 7 nm\), ([0-9.]+) for Wormhole \(12 nm\)", text)
    assert quoted, "the page no longer quotes the factors"
    assert float(quoted.group(1)) == round(stillmaker_energy_factor(7), 3)
    assert float(quoted.group(2)) == round(stillmaker_energy_factor(12), 3)
    assert ".. energy-presets::" in text  # the table itself is generated from the presets


def test_the_energy_example_file_loads() -> None:
    hw = load_hardware(ROOT / "docs" / "examples" / "mk2_5nm_energy.toml")
    assert hw.name == "mk2-5nm-energy" and hw.num_cores == preset("ipu-mk2").num_cores
    assert hw.energy_table().matrix_pj_for("float32") == 0.16
    assert hw.energy_table().matrix_pj_for("float16") == hw.matrix_pj_per_flop == 0.05
    assert hw.assumed_fields == {"sram_write_pj_per_byte": "a write taken as 15% above a read"}


def test_the_generated_energy_table_shows_each_presets_fields() -> None:
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    import hardware_presets  # noqa: PLC0415  (docs/_ext; needs sphinx, which make test installs)

    hw = preset("tt-wormhole")
    row = hardware_presets.energy_row(hw)
    assert row[0] == "``tt-wormhole``" and row[1].startswith("float32 0.104, ")
    assert row[3] == f"{hw.sram_read_pj_per_byte:.3g} / {hw.sram_write_pj_per_byte:.3g}\\*"
    assert row[4].startswith("0.646 per hop") and row[9] == "160 W"  # n150 TBP: cited, no mark
    assert "``hbm_pj_per_byte``" in row[-1] and "``sync_cycles``" not in row[-1]
    systolic = hardware_presets.energy_row(preset("ipu-mk2-systolic"))
    assert systolic[9] == "not known\\*" and "through the exchange" in systolic[4]
