"""The ``icca`` target tags, hardware selection and the compilation pipeline hook."""

from __future__ import annotations

import subprocess
import sys
import threading
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import relax as R
from tvm.target import Target

import tvm_icca
from tvm_icca.model_pass import planner

REPO = Path(__file__).resolve().parents[1]


@tvm.script.ir_module
class HostOnly:
    """Nothing the chip supports: partitioning finds no region."""

    @R.function
    def main(x: R.Tensor((1, 2, 4, 4), "float32")) -> R.Tensor((1, 2, 4, 4), "float32"):
        with R.dataflow():
            y = R.cumsum(x, axis=3)
            R.output(y)
        return y


@tvm.script.ir_module
class MatmulTopk:
    """A supported chain (matmul + bias + relu), then topk, which stays on the host."""

    @R.function
    def main(x: R.Tensor((4, 16), "float32"), w: R.Tensor((16, 8), "float32"), b: R.Tensor((8,), "float32")):
        with R.dataflow():
            y = R.nn.relu(R.add(R.matmul(x, w), b))
            t = R.topk(y, k=3, axis=-1, ret_type="values")
            R.output(y, t)
        return (y, t)


# -- target tags ---------------------------------------------------------------------------
def test_icca_tag_resolves_to_llvm_with_icca_key() -> None:
    target = Target("icca")
    assert target.kind.name == "llvm"
    assert list(target.keys) == ["icca", "cpu"]
    assert tvm_icca.is_icca_target(target) and tvm_icca.is_icca_target("icca")
    assert not tvm_icca.is_icca_target("llvm") and not tvm_icca.is_icca_target(None)


@pytest.mark.parametrize("name", tvm_icca.PRESET_NAMES)
def test_preset_tags(name: str) -> None:
    target = Target(f"icca-{name}")
    assert "icca" in target.keys and str(target.attrs["model"]) == name
    assert tvm_icca.hardware_for_target(target) == tvm_icca.preset(name)


def test_hardware_for_target_uses_context_or_default() -> None:
    assert tvm_icca.hardware_for_target("icca").name == "ipu-mk2"
    chip = tvm_icca.small_chip(8)
    with tvm_icca.use_hardware(chip):
        assert tvm_icca.hardware_for_target("icca") is chip
        assert tvm_icca.current_hardware() is chip
    assert tvm_icca.current_hardware().name == "ipu-mk2"


def test_preset_tag_and_use_hardware_must_agree() -> None:
    refined = tvm_icca.preset("ipu-pod4", link_bandwidth=1e10)
    with tvm_icca.use_hardware(refined):
        assert tvm_icca.hardware_for_target("icca-ipu-pod4") is refined
    with tvm_icca.use_hardware(tvm_icca.small_chip(8)):
        with pytest.raises(tvm_icca.InvalidHardwareSpecError, match="use_hardware"):
            tvm_icca.hardware_for_target("icca-ipu-pod4")


def test_conflicting_chip_fails_compilation_with_its_own_error() -> None:
    with tvm_icca.use_hardware(tvm_icca.small_chip(8)):
        with pytest.raises(tvm_icca.InvalidHardwareSpecError, match="icca-ipu-pod4"):
            tvm.compile(HostOnly, target="icca-ipu-pod4")


def test_use_hardware_restores_on_error_and_is_per_thread() -> None:
    with pytest.raises(RuntimeError):
        with tvm_icca.use_hardware("ipu-pod4"):
            raise RuntimeError("boom")
    assert tvm_icca.current_hardware().name == "ipu-mk2"
    seen = []
    with tvm_icca.use_hardware("ipu-pod4"):
        thread = threading.Thread(target=lambda: seen.append(tvm_icca.current_hardware().name))
        thread.start()
        thread.join()
    assert seen == ["ipu-mk2"]


def test_use_hardware_rejects_unknown_preset() -> None:
    with pytest.raises(tvm_icca.InvalidHardwareSpecError, match="unknown hardware preset"):
        with tvm_icca.use_hardware("no-such-chip"):
            pass


def _autoload_installed() -> bool:
    return any(ep.name == "icca" for ep in entry_points(group="tvm.backends"))


@pytest.mark.skipif(not _autoload_installed(), reason="needs `pip install -e .` (tvm.backends entry point)")
def test_import_tvm_alone_registers_the_plugin() -> None:
    code = (
        "import tvm\n"
        "t = tvm.target.Target('icca-ipu-pod4')\n"
        "assert 'icca' in t.keys, t\n"
        "assert tvm.get_global_func('relax.ext.icca', allow_missing=True) is not None\n"
        "assert tvm.get_global_func('icca.device.run', allow_missing=True) is not None\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", code],
                          cwd="/", capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_importing_tvm_icca_first_works() -> None:
    proc = subprocess.run([sys.executable, "-c", "import tvm_icca, tvm; tvm.target.Target('icca'); print('ok')"],
                          cwd=str(REPO), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


# -- pipeline hook ---------------------------------------------------------------------------
@pytest.fixture
def partition_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    original = planner.partition_module

    def spy(mod, spec, **kwargs):  # the pipeline passes the chip it resolved once
        calls.append(spec.name)
        return original(mod, spec, **kwargs)

    monkeypatch.setattr(planner, "partition_module", spy)
    return calls


def test_default_pipeline_partitions_only_for_icca_targets(partition_calls: list[str]) -> None:
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 4)).astype("float32")
    expected = np.cumsum(x, axis=3)
    for target in ("llvm", "icca", "icca-ipu-pod4"):
        ex = tvm.compile(HostOnly, target=target)
        out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
        np.testing.assert_allclose(out, expected)
    assert partition_calls == ["ipu-mk2", "ipu-pod4"]


def test_already_partitioned_module_is_not_partitioned_again(partition_calls: list[str]) -> None:
    part = tvm_icca.partition_for_icca(HostOnly, "ipu-pod4")
    partition_calls.clear()
    tvm.compile(part, target="icca")
    assert partition_calls == []


def test_get_default_pipeline_for_icca_targets() -> None:
    icca_pipeline = relax.get_default_pipeline(Target("icca"))
    assert icca_pipeline.info.name == "IccaPipeline"
    assert relax.pipeline.get_default_pipeline is relax.get_default_pipeline
    llvm_pipeline = relax.get_default_pipeline(Target("llvm"))
    assert llvm_pipeline.info.name != "IccaPipeline"
    # The ICCA pipeline builds a runnable module from the CPU pipeline as its base.
    ex = tvm.compile(HostOnly, target="icca", relax_pipeline=icca_pipeline)
    relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(np.zeros((1, 2, 4, 4), "float32")))


def test_named_icca_pipeline_is_registered() -> None:
    assert relax.get_pipeline("icca").info.name == "IccaPipeline"


# -- end to end (real compiler and device) -------------------------------------------------
def test_compile_and_run_with_host_fallback() -> None:
    rng = np.random.default_rng(1)
    x, w, b = (rng.standard_normal(s).astype("float32") for s in ((4, 16), (16, 8), (8,)))
    with tvm_icca.use_hardware(tvm_icca.small_chip(16)):
        ex = tvm.compile(MatmulTopk, target="icca")
    y, t = relax.VirtualMachine(ex, tvm.cpu())["main"](*map(tvm.runtime.tensor, (x, w, b)))
    y_ref = np.maximum(x @ w + b, 0)
    np.testing.assert_allclose(y.numpy(), y_ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(t.numpy(), -np.sort(-y_ref, axis=-1)[:, :3], rtol=1e-4, atol=1e-4)
    report = tvm_icca.partition_report(tvm_icca.partition_for_icca(MatmulTopk))
    assert report["host_ops"] == {"relax.topk": 1}


def test_a_wrong_icca_tag_names_the_known_tags() -> None:
    from tvm_icca.backend.target import icca_tags

    with pytest.raises(tvm_icca.IccaError, match="did you mean 'icca-ipu-mk2'.*known tags: icca, icca-ipu-mk2"):
        tvm_icca.compile(tvm.IRModule(), target="icca-ipu-mk3")
    with pytest.raises(tvm_icca.IccaError, match="did you mean 'icca-ipu-pod4'"):
        tvm_icca.compile(tvm.IRModule(), target="icca-IPU-pod4")
    # every listed tag is one TVM knows
    for tag in icca_tags():
        assert "icca" in list(tvm.target.Target(tag).keys)
