"""tvm_icca.dse.gpu_points: GPU presets as points of a design-space exploration."""

from __future__ import annotations

import pytest

from runtime_sim.contract.errors import InvalidSpecError
from runtime_sim.contract.metrics import DSE_METRICS, METRICS
from tvm_icca.dse import DseSpec, expand, read_rows, run

STUDY = {
    "name": "gpus", "designs": ["off"], "gpus": ["H100", "a100", "h100"],
    "hardware": {"base": "ipu-mk2", "name": "icca-16", "num_cores": 16,
                 "sram_bytes_per_core": 65536},
    "workloads": [{"name": "llama2-7b", "tiny": True, "context": 64, "num_layers": 1}],
}


def test_gpu_points_follow_the_chips_with_keys_of_their_own():
    spec = DseSpec.from_dict(STUDY)
    assert spec.gpus == ("h100", "a100")  # canonical, once each
    points = expand(spec)
    assert [(p.gpu, p.design) for p in points] == [("", "off"), ("h100", "gpu"), ("a100", "gpu")]
    assert len({p.key for p in points}) == 3 and len({p.point_id for p in points}) == 3
    assert points[1].inputs(spec)["hardware"] == "h100"
    # the base chip's fields are the ICCA point's, never the GPU's
    assert points[0].inputs(spec)["num_cores"] == 16
    assert points[1].inputs(spec)["num_cores"] is None
    # the ICCA point's key does not change when GPUs are added to the study
    alone = expand(DseSpec.from_dict({**STUDY, "gpus": []}))
    assert [p.key for p in alone] == [points[0].key]


def test_unknown_gpu_is_one_spec_error():
    with pytest.raises(InvalidSpecError, match="unknown GPU preset 'v100'"):
        DseSpec.from_dict({**STUDY, "gpus": ["v100"]})


def test_a_gpu_point_writes_the_run_level_columns(tmp_path):
    spec = DseSpec.from_dict({**STUDY, "gpus": ["h100"], "results": str(tmp_path / "r.jsonl")})
    run(spec, jobs=1, progress=False)
    rows = {r["hardware"]: r for r in read_rows(spec.results)}
    gpu, chip = rows["h100"], rows["icca-16"]
    assert gpu["status"] == "ok" and chip["status"] == "ok", (gpu.get("reason"), chip.get("reason"))
    assert gpu["design"] == "gpu"
    for column in ("total_s", "energy_j", "average_power_w", "num_ops", "flops"):
        assert gpu[column] > 0, column
    assert gpu["roofline_s"] < gpu["total_s"]
    assert gpu["num_ops"] == chip["num_ops"]  # the same operators, priced on the GPU
    undefined = {k for k in gpu if k not in METRICS and k not in DSE_METRICS
                 and k not in gpu["inputs"]}
    assert undefined == set()
