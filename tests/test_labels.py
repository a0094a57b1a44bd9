"""Readable operator and region names in every display (runtime_sim.contract.labels).

Generated region symbols (``fused_relax_matmul_relax_add_..._icca``, hundreds of characters)
must stay machine keys: the partition report, the ``simulate`` op table and trace event
names show labels of at most 80 characters, and max pooling is called pooling, not ``reduce``.
"""

from __future__ import annotations

import json
import pathlib
import re

import onnx
import pytest
import tvm_ffi
from tvm import relax

import tvm_icca
from runtime_sim.contract.labels import (
    MAX_LABEL_CHARS,
    operator_kind_label,
    operator_label,
    region_label,
)
from tvm_icca.cli import main as cli
from tvm_icca.partition.partitioner import format_report
from tvm_icca.partition.patterns import composite_label
from tvm_icca.testing.export_corpus import CORPUS
from tvm_icca.testing.onnx_models import residual_cnn
from tvm_icca.workloads import get_workload, list_workloads

F32 = "float32"


#: The zoo's workloads (tvm-icca models) but those whose tiny one-layer module is that of
#: one listed before (the OPT sizes, Llama2-13B: one module each, so the same names;
#: test_models_left_out_are_modules_named_before checks it).
SAME_TINY_MODULE = {"opt-6.7b": "opt-1.3b", "opt-13b": "opt-1.3b", "opt-30b": "opt-1.3b",
                    "llama2-13b": "llama2-7b"}
ZOO_MODELS = [name for name in list_workloads() if name not in SAME_TINY_MODULE]

#: One chip with HBM, as ``--hw`` file: a name does not depend on the chip's size, and tiny
#: models plan for it in half the time of ``ipu-pod4-hbm`` (the pod's inter-chip trace
#: events keep one test, test_simulate_zoo_cnn_calls_max_pool_pooling)
HBM_CHIP_TOML = 'base = "ipu-mk2"\nnum_cores = 64\nhbm_bandwidth = 1e12\nhbm_controllers = 4\n'


@pytest.fixture(scope="module")
def hbm_chip(tmp_path_factory) -> pathlib.Path:
    """The file of a 64-core chip with HBM (elk-full is the default on a chip with HBM)."""
    path = tmp_path_factory.mktemp("chip") / "hbm_chip.toml"
    path.write_text(HBM_CHIP_TOML)
    return path


def test_operator_label_is_kind_and_output_shape() -> None:
    assert operator_label("conv2d + bias + relu", (1, 64, 56, 56)) == "conv2d+bias+relu [1x64x56x56]"
    assert operator_label("matmul", (1, 16, 64, 64)) == "matmul [1x16x64x64]"
    assert operator_label("layer norm") == "layer_norm"
    assert operator_label("reduce", ()) == "reduce [scalar]"
    assert operator_kind_label("") == "op"
    long = operator_label(" + ".join(["matmul"] * 40), (1, 2))
    assert len(long) <= MAX_LABEL_CHARS and long.endswith("[1x2]")


def test_pooling_composites_are_called_pooling() -> None:
    for composite, label in (("icca.max_pool2d", "max_pool2d"), ("icca.avg_pool2d", "avg_pool2d"),
                             ("icca.adaptive_avg_pool2d", "adaptive_avg_pool2d")):
        assert operator_kind_label(composite_label(composite)) == label


def test_region_label_lists_distinct_kinds_within_the_limit() -> None:
    assert region_label(["matmul + bias + relu", "softmax", "softmax"], 0) == (
        "region 0: matmul+bias+relu, softmax (3 ops)")
    assert region_label(["matmul [1x4]"], 2) == "region 2: matmul (1 op)"
    many = [f"kind{i}" for i in range(50)]
    text = region_label(many, 7)
    assert len(text) <= MAX_LABEL_CHARS
    assert text.startswith("region 7: kind0, kind1") and text.endswith(", ... (50 ops)")
    assert region_label([], 1) == "region 1 (0 ops)"


def _conv_pool_module():
    from tests.test_partition import make_mod  # pylint: disable=import-outside-toplevel

    def body(bb, x, w, b):
        y = bb.emit(relax.op.nn.conv2d(x, w, padding=1))
        y = bb.emit(relax.op.add(y, b))
        y = bb.emit(relax.op.nn.relu(y))
        y = bb.emit(relax.op.nn.max_pool2d(y, pool_size=2, strides=2))
        return bb.emit(relax.op.nn.avg_pool2d(y, pool_size=2, strides=2))

    return make_mod({"x": ((1, 4, 8, 8), F32), "w": ((8, 4, 3, 3), F32),
                     "b": ((1, 8, 1, 1), F32)}, body)


def test_partition_report_names_regions_by_their_operators() -> None:
    report = tvm_icca.partition_report(tvm_icca.partition_for_icca(_conv_pool_module()))
    (region,) = report["regions"]
    assert region["name"].startswith("fused_") and region["name"].endswith("_icca")  # machine key
    assert region["label"] == "region 0: conv2d+bias+relu, max_pool2d, avg_pool2d (3 ops)"
    text = format_report(report)
    assert region["label"] in text and region["name"] not in text
    _check_names([line.strip() for line in text.splitlines() if line.strip().startswith("region")])


def _check_names(names: list[str]) -> None:
    """Every displayed name is readable: short, no generated symbol, pooling not 'reduce'."""
    assert names
    for name in names:
        assert len(name) <= MAX_LABEL_CHARS, name
        assert "fused_" not in name and "_icca" not in name, name


def _op_table_names(out: str) -> list[str]:
    """The op column (the last, after two spaces) of the op table of `simulate`."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.rstrip().endswith("steps  op"))
    names = []
    for line in lines[start + 1:]:
        if not re.match(r"\s+\d+\s+\d+\.\d+\s", line):  # rows start with cores, start ms
            break
        names.append(line.rsplit("  ", 1)[-1])
    return names


def _trace_names(path: pathlib.Path) -> list[str]:
    events = json.loads(path.read_text())["traceEvents"]
    x = [e for e in events if e["ph"] == "X"]
    # the generated names stay reachable for machines
    assert all(e["args"]["op"] for e in x if e.get("cat") == "op")
    assert all(e["args"]["symbol"] for e in x if e.get("cat") == "region")
    return [e["name"] for e in x]


def _simulate(capsys, tmp_path: pathlib.Path, *argv: str) -> tuple[list[str], list[str]]:
    trace = tmp_path / "trace.json"
    code = cli.main(["simulate", *argv, "--no-progress", "--max-ops", "1000", "--trace", str(trace)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "fused_" not in out  # no region symbol anywhere in the printed report
    table = _op_table_names(out)
    _check_names(table)
    names = _trace_names(trace)
    _check_names(names)
    return table, names


def test_simulate_zoo_transformer_shows_labels(capsys, tmp_path) -> None:
    table, names = _simulate(capsys, tmp_path, "bert-large", "--tiny", "--layers", "1")
    assert "attention [1x4x16x16]" in table  # scores, softmax and P V: one operator
    assert any(n.startswith("region 0: ") for n in names)


def test_simulate_zoo_cnn_calls_max_pool_pooling(capsys, tmp_path) -> None:
    table, names = _simulate(capsys, tmp_path, "resnet50", "--tiny", "--layers", "1",
                             "--hw", "ipu-pod4-hbm")
    assert any(n.startswith("max_pool2d [") for n in table)
    assert any(n.startswith("max_pool2d [") for n in names)
    assert not any(n.startswith("reduce") for n in table)


@pytest.mark.parametrize("design", ["off", "elk-full"])
def test_simulate_onnx_model_shows_labels(design, hbm_chip, capsys, tmp_path) -> None:
    path = tmp_path / "cnn.onnx"
    onnx.save(residual_cnn().model, str(path))
    table, names = _simulate(capsys, tmp_path, str(path), "--design", design,
                             "--hw", str(hbm_chip))
    assert any(n.startswith("conv2d") for n in table)
    assert any(n.startswith("conv2d") for n in names)


def test_op_kinds_group_operators_in_the_users_words(hbm_chip) -> None:
    from runtime_sim.contract.hardware_files import load_hardware
    from tvm_icca.drivers.device_programs import compile_programs
    from tvm_icca.workloads import get_workload

    report = compile_programs(get_workload("resnet50", tiny=True, num_layers=1),
                              load_hardware(hbm_chip)).simulate()
    kinds = {row["kind"] for row in report.op_kinds}
    assert "max_pool2d" in kinds and "conv2d" in kinds and "reduce" not in kinds
    assert sum(row["num_ops"] for row in report.op_kinds) == report.num_ops


def _labels_in(data) -> list[str]:
    """Every string a JSON report shows as a name: ``label``, ``op_labels``, ``kind`` values."""
    found: list[str] = []
    if isinstance(data, dict):
        for key, value in data.items():
            if key in ("label", "kind") and isinstance(value, str):
                found.append(value)
            elif key == "op_labels":
                found.extend(value)
            else:
                found.extend(_labels_in(value))
    elif isinstance(data, list):
        for item in data:
            found.extend(_labels_in(item))
    return found


def test_models_left_out_are_modules_named_before() -> None:
    """Each model test_every_zoo_model_is_named_readably leaves out is, tiny with one layer
    (what it simulates), the module of the model it stands for."""
    def module(name: str):
        return get_workload(name, tiny=True, num_layers=1).mod

    for name, named in SAME_TINY_MODULE.items():
        assert named in ZOO_MODELS
        assert tvm_ffi.structural_equal(module(name), module(named)), name


@pytest.mark.parametrize("model", ZOO_MODELS)
def test_every_zoo_model_is_named_readably(model, hbm_chip, capsys, tmp_path) -> None:
    """simulate --json and the trace of every zoo model (tiny, one layer): no name longer
    than 80 characters, no generated symbol."""
    trace = tmp_path / "trace.json"
    code = cli.main(["simulate", model, "--tiny", "--layers", "1", "--json", "--no-progress",
                     "--hw", str(hbm_chip), "--trace", str(trace)])
    out, err = capsys.readouterr()
    assert code == 0, err
    _check_names(_labels_in(json.loads(out)))
    _check_names(_trace_names(trace))


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_export_corpus_report_is_named_readably(name: str) -> None:
    """The partition report of each export-shaped ONNX model names regions and host ops in
    at most 80 characters, without generated symbols."""
    model = tvm_icca.load_onnx(CORPUS[name]().model)
    report = tvm_icca.partition_report(tvm_icca.partition_for_icca(model, tvm_icca.small_chip(64)))
    lines = [line.strip() for line in format_report(report).splitlines()[1:] if line.strip()]
    _check_names([r["label"] for r in report["regions"]])
    assert all("fused_" not in line for line in lines)
