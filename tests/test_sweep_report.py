"""tvm_icca.dse.sweep_report: report.md (files with their command and commit, Pareto fronts,
the points), the CSV and Parquet tables, one plot per swept axis and the Pareto plots."""

from __future__ import annotations

import pytest

import tvm_icca
from tvm_icca.cli.main import main
from tvm_icca.dse import append_row, read_rows, write_report
from tvm_icca.dse.sweep_report import bound_by, markdown_table
from tvm_icca.provenance import current


def _row(hbm: float, topology: str, design: str, total: float, status: str = "ok",
         energy: bool = True) -> dict:
    inputs = {"spec": "s", "hardware": "chip", "hbm_bandwidth": hbm, "topology": topology,
              "workload": "llama2-7b", "batch": 4, "design": design}
    row = {"key": f"{hbm}-{topology}-{design}", "inputs": list(inputs), **inputs,
           "status": status, "reason": "" if status == "ok" else "PlanNotFoundError: too big",
           "compile_s": 1.0, "commit": "0123456789abcdef", "dirty": False}
    if status == "ok":
        hbm_floor = 1e-3 * 1e12 / hbm
        row.update(total_s=total, hbm_floor_s=hbm_floor, compute_floor_s=2e-4,
                   interconnect_floor_s=3e-4, floor_s=max(hbm_floor, 3e-4),
                   run_bound_by="hbm" if hbm_floor > 3e-4 else "interconnect",
                   preload_only_s=0.0, execute_only_s=total / 2,
                   preload_overlap_s=total / 2, interconnect_stall_s=0.0, hbm_utilization=0.5,
                   interconnect_utilization=0.3, flops_utilization=0.1)
        if energy:  # static spends less energy than elk-full here: a front of two designs
            row["energy_j"] = total * (50.0 if design == "static" else 120.0)
    return row


def _write(path, energy: bool = True):
    for hbm in (1e12, 4e12, 16e12):
        for topology in ("all-to-all", "mesh"):
            for design, factor in (("static", 2.0), ("elk-full", 1.2)):
                append_row(path, _row(hbm, topology, design, factor * 1e-3 * 1e12 / hbm + 3e-4,
                                      energy=energy))
    append_row(path, _row(32e12, "mesh", "static", 0.0, status="does_not_fit"))
    return path


@pytest.fixture
def results(tmp_path):
    return _write(tmp_path / "r.jsonl")


def test_table(results):
    rows = read_rows(results)
    text = markdown_table(rows)
    assert "Fixed inputs: `spec` = s, `hardware` = chip, `workload` = llama2-7b, `batch` = 4" in text
    header = next(line for line in text.splitlines() if line.startswith("| hbm_bandwidth"))
    cells = [c.strip() for c in header.strip("|").split("|")]
    # units in the headers: TB/s from the bandwidths, us per token and mJ per token from the data
    assert cells[:8] == ["hbm_bandwidth (TB/s)", "topology", "design", "status", "us/token",
                         "mJ/token", "tokens/run", "total ms"]
    assert "pareto" in cells
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert len(table) == 1 + 1 + 13  # header, rule, rows
    first = [c.strip() for c in table[2].strip("|").split("|")]
    # 1 TB/s, elk-full: 1.2 ms + 0.3 ms per run of 4 tokens = 375 us per token, 1.5 ms x 120 W
    assert first[:8] == ["1", "all-to-all", "elk-full", "ok", "375", "45", "4", "1.5"]
    assert "PlanNotFoundError: too big" in text and "13 points; 12 ok, 1 does_not_fit" in text
    assert bound_by(rows[0]) == "hbm" and bound_by(rows[-1]) == ""
    # a row written before runs reported their bound: the largest of the floors it has
    assert bound_by({"hbm_floor_s": 1e-4, "compute_floor_s": 2e-4, "interconnect_floor_s": 3e-4}) \
        == "interconnect"
    # a row that names its bound is read as it is (the cut no old floor knew)
    row = dict(rows[0], run_bound_by="edge ports", floor_s=4e-3, edge_ports_floor_s=4e-3,
               total_s=8e-3, remainder={"load wait": 3e-3, "link transfer": 4e-3, "sync": 1e-3})
    assert bound_by(row) == "edge ports"
    line = [c.strip() for c in markdown_table([row]).splitlines()[-1].strip("|").split("|")]
    assert line[line.index("edge ports") - 1:line.index("edge ports") + 3] == [
        "4", "edge ports", "2.00x", "link transfer 50%, load wait 38%"]


def test_report_files_formats_and_fronts(results, tmp_path):
    pandas = pytest.importorskip("pandas")
    out = tmp_path / "report"
    written = write_report(results, out, formats=["md", "csv", "parquet"], command="dse-cmd X")
    assert [p.rsplit("/", 1)[1] for p in written] == [
        "report.md", "table.csv", "table.parquet", "hbm_bandwidth.png", "topology.png",
        "pareto_energy.png"]  # no pareto_sram.png: every chip has the same SRAM
    for path in written[3:]:
        assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    csv = pandas.read_csv(written[1])
    parquet = pandas.read_parquet(written[2])
    assert len(csv) == len(parquet) == 13 and list(csv.columns) == list(parquet.columns)
    for frame in (csv, parquet):
        ok = frame[frame["status"] == "ok"]
        assert (ok["time_per_token_s"] * 4 - ok["total_s"]).abs().max() < 1e-15
        # the energy front: at 16 TB/s elk-full is fastest, static spends least (both
        # topologies are equal: duplicates are on the front together)
        front = ok[ok["pareto"]]
        assert sorted(zip(front["hbm_bandwidth"], front["design"])) == [
            (16e12, "elk-full"), (16e12, "elk-full"), (16e12, "static"), (16e12, "static")]
    text = open(written[0], encoding="utf-8").read()
    # every file with the command and commit that made it; the results with the rows' commit
    origin = current()
    assert "`dse-cmd X`" in text and origin.short_commit in text and "0123456789" in text
    assert "[pareto_energy.png](pareto_energy.png)" in text
    assert "batch=4, workload=llama2-7b: 4 of 12 points on the front" in text
    assert "| hbm_bandwidth 16 TB/s, all-to-all, elk-full" in text
    with pytest.raises(tvm_icca.IccaError, match="unknown report format.*'xlsx'"):
        write_report(results, out, formats=["xlsx"])


def test_no_energy_no_energy_front(tmp_path):
    path = _write(tmp_path / "r.jsonl", energy=False)
    written = write_report(path, tmp_path / "o", plots=True)
    assert not any(p.endswith("pareto_energy.png") for p in written)
    text = open(written[0], encoding="utf-8").read()
    assert "None: no row has an energy (`energy_j`)" in text
    assert "mJ/token" not in text  # no energy column made up


def test_command_line(results, tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["dse", "report", str(results), "--out", str(out), "--no-plots",
                 "--format", "csv", "--format", "parquet,md"]) == 0
    printed = capsys.readouterr().out.split()
    assert [p.rsplit("/", 1)[1] for p in printed] == ["report.md", "table.csv", "table.parquet"]
    text = (out / "report.md").read_text()
    assert f"`tvm-icca dse report {results} --out {out} --format csv,parquet,md --no-plots`" in text
    assert main(["dse", "report", str(results), "--format", "xlsx"]) == 2
    assert "unknown format xlsx" in capsys.readouterr().err
    assert main(["dse", "report"]) == 2
    assert "give the results file" in capsys.readouterr().err
    assert main(["dse", "report", str(tmp_path / "none.jsonl")]) == 2
    assert main(["dse", str(results), "--out", "x"]) == 2
    assert main(["dse", str(results), "--format", "csv"]) == 2
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(tvm_icca.IccaError, match="no rows"):
        write_report(empty)


def test_an_input_that_moves_with_another_is_one_plot(tmp_path):
    # a preset's link latency comes with its topology: one plot, the latency under each tick
    path = tmp_path / "r.jsonl"
    latency = {"all-to-all": 9.5e-8, "mesh": 1.25e-9}
    for hbm in (1e12, 4e12):
        for topology in ("all-to-all", "mesh"):
            row = _row(hbm, topology, "static", 1e-3 / (hbm / 1e12))
            row["link_latency_s"] = latency[topology]
            row["inputs"].append("link_latency_s")
            append_row(path, row)
    written = write_report(path, tmp_path / "o")
    assert [p.rsplit("/", 1)[1] for p in written] == ["report.md", "hbm_bandwidth.png",
                                                      "topology.png", "pareto_energy.png"]
    text = open(written[0], encoding="utf-8").read()
    assert "No plot against `link_latency_s`: it moves with `topology`" in text


def test_too_many_panels_make_a_figure_per_workload(tmp_path, monkeypatch):
    monkeypatch.setattr("tvm_icca.dse.report_plots.MAX_PANELS", 2)
    path = tmp_path / "r.jsonl"
    for workload in ("llama2-7b", "opt-1.3b"):
        for hbm in (1e12, 4e12):
            for topology in ("all-to-all", "mesh"):
                row = _row(hbm, topology, "static", 1e-3 / (hbm / 1e12))
                row.update(workload=workload, key=f"{workload}{hbm}{topology}")
                append_row(path, row)
    names = [p.rsplit("/", 1)[1] for p in write_report(path, tmp_path / "o")]
    # 4 panels (2 workloads x 2 of the other input) > 2: one figure per workload, none cut
    assert names[1:5] == ["hbm_bandwidth_llama2-7b.png", "hbm_bandwidth_opt-1.3b.png",
                          "topology_llama2-7b.png", "topology_opt-1.3b.png"]
