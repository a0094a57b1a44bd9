"""tvm_icca.dse.sweep_report: the markdown table and one plot per swept axis of a results file."""

from __future__ import annotations

import pytest

import tvm_icca
from tvm_icca.cli.main import main
from tvm_icca.dse import append_row, write_report
from tvm_icca.dse.sweep_report import bound_by, markdown_table


def _row(hbm: float, topology: str, design: str, total: float, status: str = "ok") -> dict:
    inputs = {"spec": "s", "hardware": "chip", "hbm_bandwidth": hbm, "topology": topology,
              "workload": "llama2-7b", "batch": 1, "design": design}
    row = {"key": f"{hbm}-{topology}-{design}", "inputs": list(inputs), **inputs,
           "status": status, "reason": "" if status == "ok" else "PlanNotFoundError: too big",
           "compile_s": 1.0}
    if status == "ok":
        row.update(total_s=total, hbm_floor_s=1e-3 * 1e12 / hbm, compute_floor_s=2e-4,
                   interconnect_floor_s=3e-4, preload_only_s=0.0, execute_only_s=total / 2,
                   preload_overlap_s=total / 2, interconnect_stall_s=0.0, hbm_utilization=0.5,
                   interconnect_utilization=0.3, flops_utilization=0.1)
    return row


@pytest.fixture
def results(tmp_path):
    path = tmp_path / "r.jsonl"
    for hbm in (1e12, 4e12, 16e12):
        for topology in ("all-to-all", "mesh"):
            for design, factor in (("static", 2.0), ("elk-full", 1.2)):
                append_row(path, _row(hbm, topology, design, factor * 1e-3 * 1e12 / hbm + 3e-4))
    append_row(path, _row(32e12, "mesh", "static", 0.0, status="does_not_fit"))
    return path


def test_table(results):
    from tvm_icca.dse import read_rows

    rows = read_rows(results)
    text = markdown_table(rows)
    assert "Fixed inputs: `spec` = s, `hardware` = chip, `workload` = llama2-7b, `batch` = 1" in text
    header = next(line for line in text.splitlines() if line.startswith("| hbm_bandwidth"))
    assert header.startswith("| hbm_bandwidth | topology | design | status | total ms")
    assert sum(line.startswith("|") for line in text.splitlines()) == 1 + 1 + 13  # header, rule, rows
    assert "PlanNotFoundError: too big" in text and "13 points; 12 ok, 1 does_not_fit" in text
    assert bound_by(rows[0]) == "hbm" and bound_by(rows[-1]) == ""
    # a row written before runs reported their bound: the largest of the floors it has
    assert bound_by({"hbm_floor_s": 1e-4, "compute_floor_s": 2e-4, "interconnect_floor_s": 3e-4}) \
        == "interconnect"
    # a row that names its bound is read as it is (the cut no old floor knew)
    row = dict(rows[0], run_bound_by="edge ports", floor_s=4e-3, edge_ports_floor_s=4e-3,
               total_s=8e-3, remainder={"load wait": 3e-3, "link transfer": 4e-3, "sync": 1e-3})
    assert bound_by(row) == "edge ports"
    line = markdown_table([row]).splitlines()[-1]
    assert "| 4 | edge ports | 2.00x | link transfer 50%, load wait 38% |" in line


def test_plots_one_per_axis(results, tmp_path):
    out = tmp_path / "report"
    written = write_report(results, out)
    assert [p.rsplit("/", 1)[1] for p in written] == ["report.md", "hbm_bandwidth.png",
                                                      "topology.png"]
    for path in written[1:]:
        assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_command_line(results, tmp_path, capsys):
    assert main(["dse", "report", str(results), "--out", str(tmp_path / "o"), "--no-plots"]) == 0
    assert capsys.readouterr().out.strip().endswith("report.md")
    assert main(["dse", "report"]) == 2
    assert "give the results file" in capsys.readouterr().err
    assert main(["dse", "report", str(tmp_path / "none.jsonl")]) == 2
    assert main(["dse", str(results), "--out", "x"]) == 2
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(tvm_icca.IccaError, match="no rows"):
        write_report(empty)
