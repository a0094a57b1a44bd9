"""The codegen ``relax.ext.icca``, the device entry ``icca.device.run`` and error propagation.

Most tests swap in a fake region compiler and a fake device (the ``fake_backend`` fixture) to
test the plumbing on its own: the fake compiler emits a program without operators and keeps
the region function; the fake device runs that function on the host CPU. Tests marked
"real" use :mod:`tvm_icca.lower.region` and :mod:`runtime_sim.functional.device`.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tvm
import tvm.testing
from tvm import relax
from tvm.script import relax as R

import tvm_icca
from runtime_sim import run_stats
from runtime_sim.contract.program import DeviceProgram, TensorDecl
from tvm_icca.model_pass import planner
from tvm_icca.device_call import device_entry
from tvm_icca.testing.device_runs import reference_build

REPO = Path(__file__).resolve().parents[1]


@tvm.script.ir_module
class MixedModule:
    """A supported chain, an op the chip lacks (cumsum), then a supported op again."""

    @R.function
    def main(
        x: R.Tensor((1, 3, 8, 8), "float32"),
        w: R.Tensor((4, 3, 3, 3), "float32"),
        b: R.Tensor((1, 4, 1, 1), "float32"),
    ) -> R.Tensor((1, 4, 8, 8), "float32"):
        with R.dataflow():
            c = R.nn.conv2d(x, w, padding=1)
            r = R.nn.relu(R.add(c, b))
            p = R.cumsum(r, axis=3)
            out = R.sigmoid(p)
            R.output(out)
        return out


@tvm.script.ir_module
class TwoOutputRegion:
    """matmul's result is both returned and activated: the region has a tuple result."""

    @R.function
    def main(x: R.Tensor((4, 8), "float32"), w: R.Tensor((8, 16), "float32")):
        with R.dataflow():
            y = R.matmul(x, w)
            z = R.nn.relu(y)
            R.output(y, z)
        return (y, z)


@tvm.script.ir_module
class ScalarConstant:
    """A scalar constant reaches the region as a 0-d parameter."""

    @R.function
    def main(x: R.Tensor((4, 8), "float32")) -> R.Tensor((4, 8), "float32"):
        with R.dataflow():
            y = R.multiply(R.tanh(x), R.const(0.5, "float32"))
            R.output(y)
        return y


def random_inputs(mod: tvm.IRModule, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal([int(d) for d in p.ty.shape.values]).astype(str(p.ty.dtype))
        for p in mod["main"].params
    ]


def run(ex: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(a) for a in inputs])
    return [o.numpy() for o in out] if not hasattr(out, "numpy") else [out.numpy()]


def reference(mod: tvm.IRModule, inputs: list[np.ndarray]) -> list[np.ndarray]:
    return run(reference_build(mod), inputs)


class FakeBackend:
    """A region compiler and a device that together compute regions with TVM on the host."""

    def __init__(self) -> None:
        self.regions: dict[str, relax.Function] = {}
        self.programs: list[DeviceProgram] = []
        self.compile_error: BaseException | None = None
        self.device_error: BaseException | None = None
        self.stats = {"runs": 0}

    # -- tvm_icca.model_pass.region_plans.compile_region, as the planning pass calls it -----------------------
    def compile_region(self, func: relax.Function, name: str, hw: tvm_icca.HardwareSpec,
                       **_options: Any) -> DeviceProgram:
        if self.compile_error is not None:
            raise self.compile_error
        self.regions[name] = func
        ret = func.ret_ty
        n_out = len(ret.fields) if isinstance(ret, relax.TupleType) else 1
        inputs = tuple(
            TensorDecl(f"in{i}", tuple(int(d) for d in p.ty.shape.values), str(p.ty.dtype))
            for i, p in enumerate(func.params)
        )
        return DeviceProgram(region=name, hardware=hw.to_dict(), inputs=inputs,
                             outputs=tuple(f"out{i}" for i in range(n_out)), ops=())

    # -- the device and runtime_sim.run_stats, as tvm_icca.device_call.device_entry calls them -----------
    def get_device(self) -> "FakeBackend":
        return self

    def last_run_stats(self, **_options: Any) -> dict:
        return dict(self.stats)

    def run(self, program: DeviceProgram, inputs: list[np.ndarray]) -> list[np.ndarray]:
        if self.device_error is not None:
            raise self.device_error
        self.programs.append(program)
        self.stats["runs"] += 1
        func = self.regions[program.region]
        for attr in ("Codegen", "global_symbol", tvm_icca.partition.partitioner.HARDWARE_ATTR):
            func = func.without_attr(attr)
        # Composites are local functions: lift them so the host pipeline can build the region.
        mod = relax.transform.LambdaLift()(tvm.IRModule({"main": func}))
        return run(reference_build(mod), inputs)


@pytest.fixture
def fake_backend(monkeypatch: pytest.MonkeyPatch) -> FakeBackend:
    fake = FakeBackend()
    monkeypatch.setattr(planner, "compile_region", fake.compile_region)
    # the fake plans region by region: model state sent by the host (a model kept on chip is
    # planned as a whole, T10 Algorithm 1, which the fake does not stand in for)
    monkeypatch.setattr(planner, "state_candidates",
                        lambda spec, requested: [planner.StatePlacement("host", "test")])
    monkeypatch.setattr(device_entry, "get_device", fake.get_device)
    monkeypatch.setattr(run_stats, "last_run_stats", fake.last_run_stats)
    return fake


# -- registration --------------------------------------------------------------------------
def test_global_functions_are_registered() -> None:
    assert tvm.get_global_func("relax.ext.icca", allow_missing=True) is not None
    assert tvm.get_global_func("icca.device.run", allow_missing=True) is not None


# -- plumbing with the fake backend ----------------------------------------------------------
@pytest.mark.parametrize("mod", [MixedModule, TwoOutputRegion, ScalarConstant],
                         ids=["mixed", "tuple-output", "scalar-constant"])
def test_compiled_module_matches_llvm(fake_backend: FakeBackend, mod: tvm.IRModule) -> None:
    inputs = random_inputs(mod)
    with tvm_icca.use_hardware(tvm_icca.small_chip(4)):
        ex = tvm.compile(mod, target="icca")
    got = run(ex, inputs)
    for g, r in zip(got, reference(mod, inputs), strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)
    # Every region went through the device, with the chip chosen at compile time.
    assert {p.region for p in fake_backend.programs} == set(fake_backend.regions)
    assert all(p.hardware["name"] == "icca-4" for p in fake_backend.programs)
    assert tvm_icca.last_run_stats() == {"runs": len(fake_backend.programs)}


def test_region_names_are_global_symbols(fake_backend: FakeBackend) -> None:
    part = tvm_icca.partition_for_icca(MixedModule)
    ex = tvm.compile(part, target="icca")
    run(ex, random_inputs(MixedModule))
    assert set(fake_backend.regions) == set(tvm_icca.icca_regions(part))
    assert len(fake_backend.regions) == 2


def test_program_text_is_parsed_once(fake_backend: FakeBackend) -> None:
    ex = tvm.compile(TwoOutputRegion, target="icca")
    device_entry.parse_program.cache_clear()
    inputs = random_inputs(TwoOutputRegion)
    for _ in range(3):
        run(ex, inputs)
    info = device_entry.parse_program.cache_info()
    assert info.misses == 1 and info.hits == 2


# -- errors ----------------------------------------------------------------------------------
def test_foreign_compile_error_becomes_icca_error(fake_backend: FakeBackend) -> None:
    fake_backend.compile_error = tvm.error.InternalError("some TVM failure\nwith C++ context")
    with pytest.raises(tvm_icca.IccaError) as info:
        tvm.compile(TwoOutputRegion, target="icca")
    message = str(info.value)
    assert "ICCA codegen failed for region 'fused_relax_matmul_relax_nn_relu_icca'" in message
    assert "some TVM failure" in message and "C++ context" not in message


def test_icca_compile_error_keeps_its_class(fake_backend: FakeBackend) -> None:
    error = tvm_icca.PlanNotFoundError("no plan of matmul fits 4 cores")
    fake_backend.compile_error = error
    with pytest.raises(tvm_icca.PlanNotFoundError, match="no plan of matmul fits 4 cores") as info:
        tvm.compile(TwoOutputRegion, target="icca")
    assert info.value is error


def test_device_error_reaches_the_caller_unchanged(fake_backend: FakeBackend) -> None:
    ex = tvm.compile(TwoOutputRegion, target="icca")
    error = tvm_icca.SramOverflowError("matmul", 3, 1024, 4096)
    fake_backend.device_error = error
    with pytest.raises(tvm_icca.SramOverflowError) as info:
        run(ex, random_inputs(TwoOutputRegion))
    assert info.value is error
    assert (info.value.core, info.value.budget_bytes, info.value.needed_bytes) == (3, 1024, 4096)


def test_device_error_from_another_thread_keeps_class_and_message(fake_backend: FakeBackend) -> None:
    # The error object is remembered per thread; an error crossing into another thread's
    # FFI call is rebuilt from its class and message.
    import threading

    ex = tvm.compile(TwoOutputRegion, target="icca")
    fake_backend.device_error = tvm_icca.DeviceProgramError("bad program")
    caught: list[BaseException] = []

    def worker() -> None:
        try:
            run(ex, random_inputs(TwoOutputRegion))
        except BaseException as err:  # pylint: disable=broad-except
            caught.append(err)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert isinstance(caught[0], tvm_icca.DeviceProgramError) and "bad program" in str(caught[0])


def test_program_with_wrong_signature_is_rejected(fake_backend: FakeBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    original = fake_backend.compile_region

    def drop_an_input(func, name, hw, **options):
        program = original(func, name, hw, **options)
        return DeviceProgram(program.region, program.hardware, program.inputs[:-1], program.outputs, ())

    monkeypatch.setattr(planner, "compile_region", drop_an_input)
    with pytest.raises(tvm_icca.IccaError, match=r"has 1 input\(s\), but main calls the region with 2"):
        tvm.compile(TwoOutputRegion, target="icca")


def test_device_result_shape_is_checked(fake_backend: FakeBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    ex = tvm.compile(TwoOutputRegion, target="icca")
    monkeypatch.setattr(fake_backend, "run", lambda program, inputs: [np.zeros((2, 2), "float32")] * 2)
    with pytest.raises(tvm_icca.DeviceProgramError, match="shape"):
        run(ex, random_inputs(TwoOutputRegion))


# -- export_library round trip ---------------------------------------------------------------
_FAKE_DEVICE_IN_SUBPROCESS = """
import types
import numpy as np
from tvm_icca.device_call import device_entry
# The region of the exported model computes relu(x @ w) and returns (x @ w, relu(x @ w)).
def run(program, inputs):
    y = inputs[0] @ inputs[1]
    return [y, np.maximum(y, 0)]
device_entry.get_device = lambda: types.SimpleNamespace(run=run)
"""

_LOAD_AND_RUN = """
import sys
import numpy as np
import tvm
import tvm.testing
import tvm_icca  # the plugin: registers icca.device.run
from tvm import relax
ex = tvm.runtime.load_module(sys.argv[1])
vm = relax.VirtualMachine(ex, tvm.cpu())
data = np.load(sys.argv[2])
out = vm["main"](*[tvm.runtime.tensor(data[k]) for k in sorted(data.files)])
outs = [out] if hasattr(out, "numpy") else list(out)
np.savez(sys.argv[3], *[o.numpy() for o in outs])
"""


def _round_trip(ex: Any, inputs: list[np.ndarray], tmp_path: Path, prelude: str = "") -> list[np.ndarray]:
    lib = tmp_path / "model.so"
    ex.export_library(str(lib))
    np.savez(tmp_path / "inputs.npz", **{f"a{i:02d}": a for i, a in enumerate(inputs)})
    script = textwrap.dedent(prelude) + textwrap.dedent(_LOAD_AND_RUN)
    proc = subprocess.run(
        [sys.executable, "-c", script, str(lib), str(tmp_path / "inputs.npz"), str(tmp_path / "out.npz")],
        cwd=str(REPO), capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = np.load(tmp_path / "out.npz")
    return [result[f"arr_{i}"] for i in range(len(result.files))]


def test_export_library_round_trip_with_fake_device(fake_backend: FakeBackend, tmp_path: Path) -> None:
    ex = tvm.compile(TwoOutputRegion, target="icca")
    inputs = random_inputs(TwoOutputRegion)
    got = _round_trip(ex, inputs, tmp_path, prelude=_FAKE_DEVICE_IN_SUBPROCESS)
    for g, r in zip(got, reference(TwoOutputRegion, inputs), strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)


# -- real compiler and device ----------------------------------------------------------------
def test_export_library_round_trip_real(tmp_path: Path) -> None:
    with tvm_icca.use_hardware(tvm_icca.small_chip(16)):
        ex = tvm.compile(MixedModule, target="icca")
    inputs = random_inputs(MixedModule)
    got = _round_trip(ex, inputs, tmp_path)
    for g, r in zip(got, reference(MixedModule, inputs), strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)


@tvm.script.ir_module
class SameLayerThrice:
    """One layer (matmul + relu) three times, a host op (sort) after each: one deduplicated
    region function that ``main`` calls three times per run."""

    @R.function
    def main(x: R.Tensor((8, 32), "float32"), w: R.Tensor((32, 32), "float32")):
        with R.dataflow():
            a = R.sort(R.nn.relu(R.matmul(x, w)), axis=1)
            b = R.sort(R.nn.relu(R.matmul(a, w)), axis=1)
            c = R.sort(R.nn.relu(R.matmul(b, w)), axis=1)
            R.output(c)
        return c


def _device_calls(mod: tvm.IRModule) -> list[str]:
    """The packed functions ``main`` calls with ``call_dps_packed`` (one per region call)."""
    calls: list[str] = []

    def visit(expr: Any) -> None:
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.call_dps_packed":
            calls.append(str(expr.args[0].global_symbol))

    relax.analysis.post_order_visit(mod["main"], visit)
    return calls


def test_run_statistics_count_every_call_of_a_shared_region() -> None:
    hw = tvm_icca.small_chip(16)
    lowered = tvm_icca.offload_to_icca(hw)(SameLayerThrice)
    calls = _device_calls(lowered)
    assert len(calls) == 3 and len(set(calls)) == 1  # one region function, called 3 times
    # weights sent by the host: every call shifts (kept on chip, idle plans may not)
    vm = relax.VirtualMachine(tvm_icca.compile(SameLayerThrice, hw, state="host"), tvm.cpu())
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 32)).astype(np.float32)
    w = (rng.standard_normal((32, 32)) / 8).astype(np.float32)
    want = x
    for _ in range(3):
        want = np.sort(np.maximum(want @ w, 0), axis=1)
    for _ in range(2):  # each invocation is a run of its own, not a continuation
        got = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w)).numpy()
        tvm.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        stats = tvm_icca.last_run_stats()
        assert stats["regions_executed"] == len(calls)
        assert [r["region"] for r in stats["regions"]] == calls
        # the totals cover the whole run: every call's traffic, not the last call's
        per_call = [r["shift_bytes"] for r in stats["regions"]]
        assert per_call[0] > 0 and stats["shift_bytes"] == sum(per_call)
        assert len({op["name"] for op in stats["simulated_ops"]}) >= 1
        assert len(stats["simulated_ops"]) == sum(len(r["ops"]) for r in stats["regions"])


@tvm.script.ir_module
class AllOnChip:
    """A matmul and a ReLU: every operator runs on the chip, none is left for TVM's host TIR."""

    @R.function
    def main(x: R.Tensor((16, 32), "float32"), w: R.Tensor((32, 8), "float32")) -> R.Tensor((16, 8), "float32"):
        with R.dataflow():
            y = R.nn.relu(R.matmul(x, w))
            R.output(y)
        return y


def test_a_model_wholly_on_the_chip_links_through_tvms_jit_and_runs():
    """With no host TIR, TVM roots the executable in an empty C source module, so a virtual
    machine made from it exports and links a shared library first (``Executable.jit``; the
    suite's conftest skips that re-link elsewhere): the linked library runs and matches numpy."""
    ex = tvm.compile(AllOnChip, target="icca")
    unlinked = ex.mod._collect_from_import_tree(lambda m: m.kind in ("c", "static_library"))
    assert [m.inspect_source().strip() for m in unlinked] == [";"]
    linked = ex.jit(force_recompile=True)  # TVM's own export and link, as a user's VM does
    assert not linked._collect_from_import_tree(lambda m: m.kind == "c")
    x, w = random_inputs(AllOnChip)
    got = relax.VirtualMachine(linked, tvm.cpu())["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w))
    np.testing.assert_allclose(got.numpy(), np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)
