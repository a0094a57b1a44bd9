"""tvm_icca.compile and compile_programs take the model-level options of CompileOptions,
``jobs`` included (the worker processes of the plan search)."""

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_icca
from tvm_icca.testing.relax_functions import relax_function


def _matmul_relu() -> tvm.IRModule:
    fn = relax_function([(32, 64), (64, 48)], lambda x, w: relax.op.nn.relu(relax.op.matmul(x, w)))
    return tvm.IRModule({"main": fn.with_attr("global_symbol", "main")})


@pytest.mark.parametrize("jobs", [1, 2])
def test_compile_with_jobs_is_exact(jobs):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((32, 64), "float32"), rng.standard_normal((64, 48), "float32")
    executable = tvm_icca.compile(_matmul_relu(), tvm_icca.small_chip(16, 32 * 1024), jobs=jobs)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w)).numpy()
    np.testing.assert_allclose(out, np.maximum(x @ w, 0), rtol=1e-4, atol=1e-4)
    assert tvm_icca.last_run_stats()["regions_executed"] == 1


def test_jobs_do_not_change_the_programs():
    hw = tvm_icca.small_chip(16, 32 * 1024)
    one = tvm_icca.compile_programs(_matmul_relu(), hw, jobs=1, progress=False)
    two = tvm_icca.compile_programs(_matmul_relu(), hw, jobs=2, progress=False)
    assert [p.to_json() for p in one.programs] == [p.to_json() for p in two.programs]


@pytest.mark.parametrize("jobs", [0, -1, 1.5, True])
def test_bad_jobs_is_one_clear_error(jobs):
    with pytest.raises(tvm_icca.IccaError, match="jobs"):
        tvm_icca.compile(_matmul_relu(), "ipu-mk2", jobs=jobs)
    with pytest.raises(tvm_icca.IccaError, match="jobs"):
        tvm_icca.compile_programs(_matmul_relu(), "ipu-mk2", jobs=jobs)


def test_a_plan_cache_is_shared_with_the_timing_only_path():
    """``tvm_icca.compile(..., plan_cache=)`` plans into the cache it is given: the
    timing-only path then finds every plan there (no search of its own) and compiles what a
    fresh search does. (The test suite's one-compiler checks share a cache so; a search of their own gives
    those programs too: test_planner.)"""
    hw = tvm_icca.small_chip(16, 32 * 1024).with_overrides(name="hbm-16", hbm_bandwidth=1e11,
                                                           hbm_controllers=2)
    cache = tvm_icca.PlanCache(jobs=1)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((32, 64), "float32"), rng.standard_normal((64, 48), "float32")
    executable = tvm_icca.compile(_matmul_relu(), hw, plan_cache=cache)
    out = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x),
                                                             tvm.runtime.tensor(w)).numpy()
    np.testing.assert_allclose(out, np.maximum(x @ w, 0), rtol=1e-4, atol=1e-4)
    assert cache.misses > 0
    timed = tvm_icca.compile_programs(_matmul_relu(), hw, plan_cache=cache, progress=False)
    assert timed.plan_cache["misses"] == 0 and timed.plan_cache["hits"] > 0
    fresh = tvm_icca.compile_programs(_matmul_relu(), hw, jobs=1, progress=False)
    assert [p.to_json() for p in timed.programs] == [p.to_json() for p in fresh.programs]
