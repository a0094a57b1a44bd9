"""tvm_icca.dse.report_plots: what a reader sees, checked on the figures' artists."""

from __future__ import annotations

import pytest

from tvm_icca.dse.columns import derived_rows
from tvm_icca.dse.report_plots import axis_plot, input_unit, pareto_plot

pytest.importorskip("matplotlib")


def _rows():
    rows = []
    for workload, batch in (("llama2-7b", 8), ("resnet50", 2)):
        for hbm in (1e12, 4e12, 16e12):
            for topology in ("all-to-all", "mesh"):
                for design, factor in (("static", 2.0), ("elk-full", 1.0)):
                    if workload == "resnet50" and hbm != 4e12:
                        continue  # one value of the axis in its panels: markers, no lines
                    inputs = {"workload": workload, "batch": batch, "hbm_bandwidth": hbm,
                              "topology": topology, "sram_bytes_per_core": 4096 * (1 + factor),
                              "design": design}
                    total = factor * 1e-3 * 1e12 / hbm
                    rows.append({"key": f"{workload}{hbm}{topology}{design}",
                                 "inputs": list(inputs), **inputs, "status": "ok",
                                 "total_s": total, "floor_s": total / 2,
                                 "hbm_floor_s": total / 2, "run_bound_by": "hbm",
                                 "energy_j": total * (40.0 if design == "static" else 100.0)})
    return derived_rows(rows)


def _lines(ax):
    """Solid lines of two or more points (not floors, not single markers)."""
    return [line for line in ax.get_lines()
            if len(line.get_xdata()) > 1 and line.get_linestyle() == "-"]


def test_input_units():
    assert input_unit("hbm_bandwidth", [4e12, 16e12]) == ("TB/s", 1e12)
    assert input_unit("link_bandwidth", [5.5e9, 11e9]) == ("GB/s", 1e9)
    assert input_unit("sram_bytes_per_core", [638976]) == ("KiB", 1024.0)
    assert input_unit("link_latency_s", [2e-7]) == ("ns", 1e-9)
    assert input_unit("num_cores", [1472]) == ("", 1.0)


def test_numeric_axis_panels_units_and_log_ticks(tmp_path):
    rows = _rows()
    fig = axis_plot(rows, "hbm_bandwidth", ["workload", "topology"], ["static", "elk-full"],
                    str(tmp_path / "hbm.png"))
    axes = [ax for ax in fig.axes if ax.get_visible()]
    titles = [ax.get_title() for ax in axes]
    # one panel per workload and topology: never a line across two workloads
    assert sorted(t.split("\n")[0] for t in titles) == ["llama2-7b"] * 2 + ["resnet50"] * 2
    llama = axes[titles.index("llama2-7b\ntopology=all-to-all")]
    assert llama.get_xscale() == "log"  # 1 to 16 TB/s spans 16x
    assert [t.get_text() for t in llama.get_xticklabels()] == ["1", "4", "16"]
    assert llama.get_xlabel() == "hbm_bandwidth (TB/s)"
    # 8 tokens per run: elk-full at 1 TB/s is 1 ms per run, 125 us per token
    assert llama.get_ylabel() == "time per token (us)"
    assert len(_lines(llama)) == 2  # a line per design
    ys = sorted(max(line.get_ydata()) for line in _lines(llama))
    assert ys == pytest.approx([125.0, 250.0])
    assert any(line.get_linestyle() == "--" for line in llama.get_lines())  # the hbm floor
    # the resnet panels have one HBM value: per sample, markers only, no line
    resnet = axes[titles.index("resnet50\ntopology=mesh")]
    assert resnet.get_ylabel() == "time per sample (us)" and _lines(resnet) == []


def test_categorical_axis_is_grouped_bars(tmp_path):
    rows = [r for r in _rows() if r["workload"] == "llama2-7b"]
    fig = axis_plot(rows, "topology", ["workload", "hbm_bandwidth"], ["static", "elk-full"],
                    str(tmp_path / "topology.png"))
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 3  # one panel per HBM bandwidth
    first = axes[0]
    assert "hbm_bandwidth=1 TB/s" in first.get_title()
    assert len(first.patches) == 4  # 2 topologies x 2 designs
    assert _lines(first) == []  # no line joins categories
    assert [t.get_text() for t in first.get_xticklabels()] == ["all-to-all", "mesh"]
    heights = sorted(p.get_height() for p in first.patches)
    assert heights == pytest.approx([125.0, 125.0, 250.0, 250.0])
    assert {t.get_text() for t in first.texts} == {"hbm"}  # each bar names its bound


def test_pareto_plot_marks_and_names_the_front(tmp_path):
    rows = _rows()
    inputs = ["workload", "batch", "hbm_bandwidth", "topology", "sram_bytes_per_core", "design"]
    fig = pareto_plot(rows, "energy_per_token_j", "pareto", inputs, str(tmp_path / "p.png"))
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 2  # one per workload instance
    llama = next(ax for ax in axes if ax.get_title().startswith("llama2-7b"))
    assert llama.get_ylabel() == "energy per token (mJ)"
    assert llama.get_xlabel() == "time per token (us)"
    front = [r for r in rows if r["workload"] == "llama2-7b" and r["pareto"]]
    # at 16 TB/s: elk-full fastest, static least energy; both topologies alike
    assert sorted((r["hbm_bandwidth"], r["design"]) for r in front) == [
        (16e12, "elk-full"), (16e12, "elk-full"), (16e12, "static"), (16e12, "static")]
    stars = [c for c in llama.collections if c.get_label() == "Pareto-optimal"][0]
    assert len(stars.get_offsets()) == len(front)
    step = [line for line in llama.get_lines() if line.get_label() == "Pareto front"][0]
    assert len(step.get_xdata()) == len(front)
    # each front point named by the inputs that vary among the workload's points
    assert sorted(t.get_text() for t in llama.texts) == sorted(
        f"hbm_bandwidth 16 TB/s, {topology}, sram_bytes_per_core {sram} KiB, {design}"
        for topology in ("all-to-all", "mesh") for sram, design in ((12, "static"),
                                                                    (8, "elk-full")))
