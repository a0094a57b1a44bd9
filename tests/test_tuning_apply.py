"""tvm_icca.use_database: tuned plans in the compiled model, exact results, stale records."""

from __future__ import annotations

import numpy as np
import tvm
import tvm.testing
from tvm import relax

import tvm_icca
from tvm_icca.programs import compile_programs

from test_tuning_session import tiny_model


def test_tuned_plan_is_compiled_and_exact(tmp_path):
    hw = tvm_icca.small_chip()
    summary = tvm_icca.tune(tiny_model(), str(tmp_path), hw, max_trials=12, batch_size=4,
                            progress=False)
    [result] = summary.results
    assert result.best_s < result.untuned_s  # the simulator prefers another plan here
    untuned = compile_programs(tiny_model(), hw)
    with tvm_icca.use_database(str(tmp_path)) as tuned:
        timed = compile_programs(tiny_model(), hw)
        with tvm_icca.use_hardware(hw):
            ex = tvm.compile(tiny_model(), target="icca")
    assert tuned.applied and "tuned plans applied" in tuned.report()
    assert all(a.tuned_s < a.untuned_s for a in tuned.applied)
    assert timed.programs[0].ops[0].plan != untuned.programs[0].ops[0].plan
    assert timed.simulate().total_s < untuned.simulate().total_s
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 96)).astype("float32")
    w = rng.standard_normal((96, 32)).astype("float32")
    b = rng.standard_normal(32).astype("float32")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w), tvm.runtime.tensor(b)).numpy()
    tvm.testing.assert_allclose(out, np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-5)


def test_record_of_another_chip_is_ignored(tmp_path):
    tvm_icca.tune(tiny_model(), str(tmp_path), tvm_icca.small_chip(), max_trials=8,
                  batch_size=4, progress=False)
    other = tvm_icca.small_chip(sram_bytes_per_core=32 * 1024)
    plain = compile_programs(tiny_model(), other)
    with tvm_icca.use_database(str(tmp_path)) as tuned:
        compiled = compile_programs(tiny_model(), other)
    assert not tuned.applied
    assert any("ignored" in note for note in tuned.notes)
    assert compiled.programs[0].ops[0].plan == plain.programs[0].ops[0].plan
