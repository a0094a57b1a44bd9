"""tvm_icca.dse.spec: a study's spec from TOML or YAML, and one InvalidSpecError per mistake."""

from __future__ import annotations

import textwrap

import pytest

import tvm_icca
from tvm_icca.dse import DseSpec, load_spec

BASE = """
name = "study"
designs = ["static", "elk-full"]
[hardware]
base = "ipu-mk2"
num_cores = 16
sram_bytes_per_core = 65536
hbm_controllers = 2
hbm_bandwidth = 1e11
[grid]
hbm_bandwidth = [1e10, 1e11]
topology = ["all-to-all", "mesh"]
[[points]]
hbm_bandwidth = 4e11
link_bandwidth = 11e9
[[workloads]]
name = "llama2-7b"
tiny = true
context = [64, 128]
"""


def _write(tmp_path, text, name="study.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_toml_spec(tmp_path):
    spec = load_spec(_write(tmp_path, BASE))
    assert spec.name == "study" and spec.designs == ("static", "elk-full")
    assert spec.hardware.num_cores == 16 and spec.fixed["hbm_bandwidth"] == 1e11
    assert spec.grid == {"hbm_bandwidth": (1e10, 1e11), "topology": ("all-to-all", "mesh")}
    assert spec.points == ({"hbm_bandwidth": 4e11, "link_bandwidth": 11e9},)
    assert [w["context"] for w in spec.workloads] == [64, 128]  # a list is an axis
    assert spec.workloads[0]["workload"] == "llama2-7b" and spec.workloads[0]["tiny"] is True
    assert spec.results == str(tmp_path / "study.jsonl")  # beside the spec, its stem
    assert spec.state is None and spec.execution == "t10"
    assert len(spec.hardware_points()) == 5 and spec.axes == ["hbm_bandwidth", "topology",
                                                              "link_bandwidth"]


def test_yaml_spec_equals_toml(tmp_path):
    yaml_text = """
    name: study
    designs: [static, elk-full]
    hardware: {base: ipu-mk2, num_cores: 16, sram_bytes_per_core: 65536,
               hbm_controllers: 2, hbm_bandwidth: 1e11}
    grid:
      hbm_bandwidth: [1e10, 1.0e+11]     # PyYAML reads 1e10 as a string: converted
      topology: [all-to-all, mesh]
    points:
      - {hbm_bandwidth: 4e11, link_bandwidth: 11e9}
    workloads:
      - {name: llama2-7b, tiny: true, context: [64, 128]}
    """
    toml = load_spec(_write(tmp_path, BASE))
    yaml = load_spec(_write(tmp_path, yaml_text, "study.yaml"))
    for field in ("name", "hardware", "fixed", "grid", "points", "workloads", "designs", "results"):
        assert getattr(yaml, field) == getattr(toml, field), field


def test_defaults_and_shorthands(tmp_path):
    spec = load_spec(_write(tmp_path, """
        hardware = "ipu-pod4-hbm"
        workloads = ["nerf"]
        results = "out/r.jsonl"
        state = "hbm"
    """, "mine.toml"))
    assert spec.name == "mine" and spec.designs == ("elk-full",)
    assert spec.hardware == tvm_icca.preset("ipu-pod4-hbm") and spec.hardware_points() == [{}]
    assert spec.results == str(tmp_path / "out" / "r.jsonl") and spec.state == "hbm"
    # a mapping works like a file
    same = DseSpec.from_dict({"hardware": "ipu-pod4-hbm", "workloads": ["nerf"]})
    assert same.workloads == ({"workload": "nerf"},)


def test_hardware_file_base(tmp_path):
    (tmp_path / "chip.toml").write_text('base = "ipu-mk2"\nnum_cores = 32\n')
    spec = load_spec(_write(tmp_path, """
        workloads = ["nerf"]
        [hardware]
        base = "chip.toml"
        sram_bytes_per_core = 131072
    """))
    assert spec.hardware.num_cores == 32 and spec.hardware.sram_bytes_per_core == 131072


@pytest.mark.parametrize("text, key, words", [
    ('hardwre = "ipu-mk2"\nworkloads = ["nerf"]', "hardwre", "did you mean 'hardware'"),
    ('workloads = ["nerf"]', "hardware", "missing"),
    ('hardware = "ipu-mk3"\nworkloads = ["nerf"]', "hardware", "unknown hardware preset"),
    ('workloads = ["nerf"]\n[hardware]\nbase = "ipu-mk2"\nnum_core = 4', "hardware.num_core",
     "did you mean 'num_cores'"),
    ('hardware = "ipu-mk2"\nworkloads = ["nerf"]\n[grid]\nhbm_bandwith = [1e12]',
     "grid.hbm_bandwith", "did you mean 'hbm_bandwidth'"),
    ('hardware = "ipu-mk2"\nworkloads = ["nerf"]\n[grid]\nnum_cores = []', "grid.num_cores",
     "has no values"),
    ('hardware = "ipu-mk2"\nworkloads = ["nerf"]\n[grid]\n', "grid", "is empty"),
    ('hardware = "ipu-mk2"\nworkloads = ["nerf"]\n[grid]\nnum_cores = [16, -1]', "grid.num_cores[1]",
     "not a usable value"),
    ('hardware = "ipu-mk2"\nworkloads = ["nerf"]\n[grid]\ntopology = ["ring"]', "grid.topology[0]",
     "topology"),
    ('hardware = "ipu-mk2"\nworkloads = ["nerf"]\n[grid]\nnum_cores = [16, 16]', "grid.num_cores",
     "twice"),
    # each value is fine, the combination is not: 15 cores on 2 chips
    ('workloads = ["nerf"]\n[hardware]\nbase = "ipu-mk2"\ninter_chip_bandwidth = 1e11\n'
     'num_cores = 16\n[grid]\nnum_cores = [16, 15]\nnum_chips = [1, 2]', "grid/points",
     "num_cores=15, num_chips=2 is impossible"),
    ('hardware = "ipu-mk2"\nworkloads = ["nerf"]\n[[points]]\nlink_bandwith = 1e9',
     "points[0].link_bandwith", "did you mean 'link_bandwidth'"),
    ('hardware = "ipu-mk2"\nworkloads = ["lama2-7b"]', "workloads[0].name",
     "did you mean 'llama2-7b'"),
    ('hardware = "ipu-mk2"\n[[workloads]]\nname = "llama2-7b"\ncontxt = 64', "workloads[0]",
     "contxt"),
    ('hardware = "ipu-mk2"\n[[workloads]]\nname = "llama2-7b"\nbatch = 0', "workloads[0]", "batch"),
    ('hardware = "ipu-mk2"\nworkloads = ["missing.onnx"]', "workloads[0].name", "no such ONNX"),
    ('hardware = "ipu-mk2"', "workloads", "missing"),
    ('hardware = "ipu-mk2"\nworkloads = ["nerf"]\ndesigns = ["elk-ful"]', "designs[0]",
     "did you mean 'elk-full'"),
    ('hardware = "ipu-mk2"\nworkloads = ["nerf"]\ndesigns = []', "designs", "non-empty"),
    ('hardware = "ipu-mk2"\nworkloads = ["nerf"]\nstate = "sram"', "state", "unknown state"),
    ('hardware = "ipu-mk2"\nworkloads = ["nerf"]\nexecution = "t11"', "execution", "t10"),
    ('hardware = "ipu-mk2"\nworkloads = ["nerf"]\nname = 3', "name", "non-empty string"),
    ('hardware = "ipu-mk2"\nworkloads = ["nerf"\n', "", "invalid TOML"),
])
def test_every_error_names_file_and_key(tmp_path, text, key, words):
    path = _write(tmp_path, text)
    with pytest.raises(tvm_icca.InvalidSpecError) as err:
        load_spec(path)
    message = str(err.value)
    assert str(path) in message and f"{key}:" in message if key else str(path) in message
    assert words in message, message


def test_file_errors(tmp_path):
    with pytest.raises(tvm_icca.InvalidSpecError, match="no such file"):
        load_spec(tmp_path / "none.toml")
    with pytest.raises(tvm_icca.InvalidSpecError, match="unknown format"):
        load_spec(_write(tmp_path, "x", "spec.json"))
    with pytest.raises(tvm_icca.InvalidSpecError, match=r"invalid YAML at line 2"):
        load_spec(_write(tmp_path, "a: [1\nb: }", "bad.yaml"))
    with pytest.raises(tvm_icca.InvalidSpecError, match="mapping"):
        load_spec(_write(tmp_path, "- 1\n- 2\n", "list.yaml"))
    assert issubclass(tvm_icca.InvalidSpecError, tvm_icca.IccaError)


def test_yaml_without_pyyaml_names_the_extra(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_yaml(name, *args, **kwargs):
        if name == "yaml":
            raise ImportError("no yaml")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_yaml)
    with pytest.raises(tvm_icca.InvalidSpecError, match=r"tvm-icca\[dse\]"):
        load_spec(_write(tmp_path, "name: x\n", "x.yaml"))
