"""``tvm-icca simulate MODEL --hw a100|h100|b200``: the GPU reference from the command line."""

from __future__ import annotations

import json

from runtime_sim.contract.metrics import METRICS
from tvm_icca.cli import main as cli


def _main(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _chip(tmp_path) -> str:
    # a 16-core chip partitions the model: the test is about the GPU, not the plans
    chip = tmp_path / "chip.toml"
    chip.write_text('base = "ipu-mk2"\nnum_cores = 16\n')
    return str(chip)


def test_simulate_on_h100_prints_the_estimate_beside_the_roofline(capsys, tmp_path):
    args = ("simulate", "llama2-7b", "--tiny", "--layers", "1", "--context", "64", "--hw",
            "H100", "--partition-hw", _chip(tmp_path), "--no-progress")
    code, out, err = _main(capsys, *args)
    assert code == 0, err
    assert "on h100 (GPU reference)" in out and "not a measurement" in out
    assert "estimate" in out and "roofline" in out
    code, out, err = _main(capsys, *args, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["hardware"] == "h100" and data["partition_hardware"] == "chip"
    assert 0 < data["roofline_s"] < data["total_s"]
    assert data["energy_j"] > 0 and data["num_ops"] > 0
    assert sorted(k for k in data if k not in METRICS) == []


def test_gpu_refuses_icca_only_options_and_chips_refuse_gpus(capsys, tmp_path):
    code, _, err = _main(capsys, "simulate", "resnet18", "--tiny", "--hw", "a100",
                         "--design", "static")
    assert code != 0 and "--design applies to ICCA chips" in err and "Traceback" not in err
    code, _, err = _main(capsys, "models", "--hw", "h100")
    assert code != 0 and "GPU preset, not an ICCA chip" in err
