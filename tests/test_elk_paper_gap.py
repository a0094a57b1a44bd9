"""benchmarks/elk_paper_gap.py: the Elk artifact's cost constants turned into chip overrides
(closed-form checks), the preset's peaks against Elk §6.3's emulator, and the summary arithmetic
on rows made up here (no compiling)."""

import math
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import elk_paper_gap as gap  # noqa: E402
from runtime_sim.contract.presets import preset  # noqa: E402


def test_artifact_constants_as_rates():
    # 2 bytes per 0.56 cycles at 1.325 GHz, slowed 1.25x across chips
    assert gap.artifact_link_bandwidth() == pytest.approx(2 / 0.56 * 1.325e9 / 1.25)
    assert 3.7e9 < gap.artifact_link_bandwidth() < 3.9e9
    assert gap.artifact_sync_cycles() == 295            # 118 x 2 x 1.25
    # 32 rows x 16 x 16 block, 2 FLOP per MAC, in 24 * ceil(32 / 6) + 514 = 658 cycles
    assert gap.artifact_decode_matmul_flops_per_cycle(32) == pytest.approx(16384 / 658)
    assert gap.artifact_decode_matmul_flops_per_cycle(32, 32) == pytest.approx(16384 / 658)
    # 128 columns: m = 128 (the longer side), two 16-wide blocks of the 32 rows per 16 of k:
    # 2 * (24 * ceil(128 / 6) + 514) = 2084 cycles for 2 * 32 * 16 * 128 FLOP
    assert gap.artifact_decode_matmul_flops_per_cycle(32, 128) == pytest.approx(131072 / 2084)
    # the fixed 514 cycles per block dominate: wider tiles amortize them, never beyond 128
    rates = [gap.artifact_decode_matmul_flops_per_cycle(32, c) for c in (32, 64, 128, 256, 4096)]
    assert rates == sorted(rates) and rates[-1] < 128


def test_preset_peaks_are_the_elk_emulators():
    """Elk §6.3: 1000 TFLOPS for MatMul, 31.2 TFLOPS for other operations on 4 chips."""
    hw = preset(gap.HW)
    assert hw.peak_flops("matrix") == pytest.approx(1000e12, rel=0.01)
    assert hw.peak_flops("vector") == pytest.approx(31.2e12, rel=0.01)
    assert hw.hbm_bandwidth == 16e12 and hw.num_cores == 5888


def test_every_setting_is_a_valid_chip():
    for s in gap.settings().values():
        hw = preset(gap.HW, **s.overrides)
        for key, value in s.overrides.items():
            got = getattr(hw, key)
            assert (tuple(got) if isinstance(got, tuple) else got) == pytest.approx(value)
    both = gap.settings()["artifact-both"].overrides
    assert both == {**gap.settings()["artifact-transfer"].overrides,
                    **gap.settings()["artifact-matmul"].overrides}


def _rows(ms, hbm_floor=2.0):
    return [{"design": d, "total_ms": t, "layers": "all", "hbm_floor_ms": hbm_floor,
             "compute_floor_ms": 1.0, "hbm_utilization": hbm_floor / t,
             "interconnect_utilization": 0.5, "achieved_flops": 1e12 / t,
             "execute_only_s": 0.001, "preload_overlap_s": 0.002}
            for d, t in zip(gap.DESIGNS, ms)]


def test_case_summary_arithmetic():
    c = gap.case_summary(_rows([8.0, 5.0, 4.5, 4.0, 3.0]))
    assert c["over_basic"] == 2.0 and c["over_static"] == 1.25
    assert c["pct_ideal"] == 75.0
    assert c["hbm"]["ideal"] == pytest.approx(100 * 2.0 / 3.0)
    # Ideal executes 1 + 2 = 3 ms against a 2 ms HBM floor: bound by execution
    assert c["ideal_exec_over_hbm"] == pytest.approx(1.5)
    assert c["ideal_over_hbm_floor"] == 1.5
    rows = _rows([8.0, 5.0, 4.5, 4.0, 3.0])
    rows[0]["total_ms"] = None      # a design that does not fit: no ratios
    assert gap.case_summary(rows) is None


def test_summary_table_averages_models_and_ends_with_the_paper():
    results = {"preset": {"a": _rows([8.0, 5.0, 4.5, 4.0, 3.0]), "b": _rows([4.0, 5.0, 4.5, 4.0, 3.0])}}
    lines = gap.summary_table(results)
    row = lines[2].split("|")
    assert row[1].strip() == "preset" and row[2].strip() == "2"
    assert row[3].strip() == "1.50x"       # mean of 2.0 and 1.0
    assert lines[-1].startswith("| **Elk paper**") and "1.87x" in lines[-1]
    assert f"{100 / 64.38:.2f}" in lines[-1]
    assert not math.isnan(float(row[5].strip().rstrip("%")))


def test_explanation_quotes_this_runs_numbers_and_says_what_was_not_run():
    results = {"preset": {"a": _rows([8.0, 5.0, 4.5, 4.0, 3.0])}}
    text = "\n".join(gap.explanation(results, batch=16, context=4096))
    assert "`preset`: 2.00x over Basic, 1.25x over Static, 75.0% of Ideal" in text
    assert "`artifact-matmul`: not run" in text
    assert "batch 16, context 4,096" in text
    assert "1000 TFLOPS" in text or "1002 TFLOPS" in text


def test_append_merges_by_setting_and_model_and_explains_on_common_models():
    def tagged(setting, model, ms):
        return [dict(r, setting=setting, model=model) for r in _rows(ms)]
    old = {"artifact-both": tagged("artifact-both", "a", [8.0, 5.0, 4.5, 4.0, 3.0]),
           "preset": tagged("preset", "a", [6.0, 5.0, 4.5, 4.0, 3.0])}
    new = {"preset": {"b": tagged("preset", "b", [4.0, 4.0, 4.0, 4.0, 4.0])},
           "artifact-both": {"a": tagged("artifact-both", "a", [12.0, 5.0, 4.5, 4.0, 3.0])}}
    out = gap.merged(old, new)
    assert list(out) == ["preset", "artifact-both"]         # the settings' own order
    assert sorted(out["preset"]) == ["a", "b"]
    assert out["artifact-both"]["a"][0]["total_ms"] == 12.0   # run again: replaced
    text = "\n".join(gap.explanation(out))
    # numbers on the common model "a"; preset's two-model average named separately
    assert "on a (the models every setting ran)" in text
    assert "`preset`: 1.50x over Basic" in text               # a alone: 6 / 4
    assert "`preset`: 1.25x over Basic, 1.12x over Static" in text and "over its 2 models" in text
    assert "`artifact-both`: 3.00x over Basic" in text
