"""The design-space studies in benchmarks/dse/ (Elk §6.4 and the mesh design): every spec
loads, expands into valid points, writes its results under benchmarks/dse/results/ and says
in its header how to run it. Nothing is compiled."""

from __future__ import annotations

import pathlib

import pytest

from runtime_sim.contract.presets import preset
from tvm_icca.dse import expand, load_spec

SPEC_DIR = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "dse"
SPECS = sorted(SPEC_DIR.glob("*.toml")) + sorted(SPEC_DIR.glob("*.y*ml"))


def test_the_studies_are_there():
    names = {path.stem for path in SPECS}
    assert {"elk_fig19_21_hbm", "elk_fig22_noc", "elk_fig23_cores", "elk_fig23_dit",
            "elk_fig24_training", "mesh_design"} <= names


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_spec_loads_and_expands(path: pathlib.Path):
    spec = load_spec(path)
    points = expand(spec)
    assert points, f"{path.name} has no points"
    assert len({p.key for p in points}) == len(points)
    assert pathlib.Path(spec.results).resolve().parent == (SPEC_DIR / "results").resolve()
    assert pathlib.Path(spec.results).stem == path.stem == spec.name
    for point in points:
        point.hw.validate()  # every chip is a valid HardwareSpec
    # topology and per-hop latency change together (explicit points): an all-to-all chip has
    # the exchange's latency, a mesh chip the mesh preset's per-hop latency
    latency = {"all-to-all": preset("ipu-pod4-hbm").link_latency_s,
               "mesh": preset("ipu-pod4-hbm-mesh").link_latency_s}
    for point in points:
        if point.hw.name.startswith("ipu-pod4"):
            assert point.hw.link_latency_s == pytest.approx(latency[point.hw.topology]), point.label()
    # the header says how to run it, with the shared plan cache
    command = (f".venv/bin/python -m tvm_icca.cli dse benchmarks/dse/{path.name} "
               "--plan-cache benchmarks/dse/.plan_cache --jobs 2")
    assert command in path.read_text(encoding="utf-8")
