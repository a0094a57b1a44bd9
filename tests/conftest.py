"""Shared test helpers: hand-built tensor expressions of common operators.

They are offered through the ``exprs`` fixture (a namespace of builder functions from
:mod:`tvm_icca.testing.exprs`) so test modules need no import path tricks.

The suite runs in parallel (``make test``: pytest-xdist, one worker per core). A test module
whose tests share an expensive module- or session-scoped fixture marks itself
``pytest.mark.xdist_group(<module>)``, so that one worker builds the fixture once; the tests
marked ``slow`` are handed out first. Tests marked ``full_size`` compile a full-size zoo model
(minutes each on one core): ``make test`` leaves them out, ``make test-full`` runs them, and CI
(``.ci/run``) runs both. So with tests marked ``long_run``: end-to-end runs whose point is a long
real run (signals at random moments in a sweep, a killed sweep resuming, the Ray backend,
docs/get_started.rst in an empty folder, the three biggest tutorials); each capability keeps a fast
test in ``make test`` (the Makefile lists them).
"""

from __future__ import annotations

import os
import types

import pytest
from hypothesis import strategies as st

from tvm_icca.testing import exprs as builders


def _random_plan(draw, expr, max_cores, core_order=False):
    """:func:`tvm_icca.testing.exprs.random_plan` driven by a hypothesis ``data.draw``."""
    return builders.random_plan(lambda options: draw(st.sampled_from(list(options))), expr, max_cores,
                                core_order)


def _one_cpu_per_worker() -> None:
    """Pin a pytest-xdist worker to one CPU of its own. ``make test`` runs one worker per
    CPU, so a compile that would fork a worker per CPU for its plan scans
    (:func:`tvm_icca.plan_search.option_pool.available_jobs` reads this affinity), or a BLAS
    or TVM thread pool sized to every CPU, only competes with the other workers; pinned, each
    runs in process."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # gw0, gw1, ...
    if not worker.startswith("gw") or not hasattr(os, "sched_setaffinity"):
        return
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > 1:
        os.sched_setaffinity(0, {cpus[int(worker[2:]) % len(cpus)]})


def _no_relink_of_empty_c_modules() -> None:
    """Let a virtual machine run an executable whose only unlinked module is TVM's empty C
    source module as it was built, without exporting and linking it first.

    When every operator of a model runs on the chip, TVM's link (``relax.build``'s
    ``VMLink``) has no TIR library and roots the executable in a C source module holding
    ``;``; ``tvm.runtime.Executable.jit``, which the first ``relax.VirtualMachine`` of it
    calls, then writes the LLVM stubs to an object file, compiles the empty C file and links
    a shared library with the C compiler: about 0.1 s a model, some 470 times in this suite
    (54 s of its CPU). The modules are runnable as built (the LLVM stubs, and a module with
    no code), so here the virtual machine gets them as they are; exporting and loading a
    library is tested where it is the point (tests/test_library.py, the CLI's compile and
    run, ``make wheel-check``), and an executable with a real C or static-library module
    still goes through ``jit``."""
    from tvm.runtime.executable import Executable  # pylint: disable=import-outside-toplevel

    link = Executable.jit

    def empty_c(module) -> bool:
        return module.kind == "c" and module.inspect_source().strip() in ("", ";")

    def jit(self, *, fcompile=None, addons=None, force_recompile=False, **kwargs):
        if (self._jitted_mod is None and fcompile is None and not addons and not kwargs
                and not force_recompile):
            unlinked = self.mod._collect_from_import_tree(  # pylint: disable=protected-access
                lambda m: m.kind in ("c", "static_library"))
            if unlinked and all(empty_c(m) for m in unlinked):
                self._jitted_mod = self.mod
        return link(self, fcompile=fcompile, addons=addons, force_recompile=force_recompile,
                    **kwargs)

    Executable.jit = jit


def pytest_configure(config: pytest.Config) -> None:
    _one_cpu_per_worker()
    _no_relink_of_empty_c_modules()
    config.addinivalue_line(
        "markers", "slow: takes 10 s or more on one core; runs first (see pytest_collection_modifyitems)")
    config.addinivalue_line(
        "markers", "full_size: compiles a full-size zoo model (minutes); `make test-full` runs these, "
        "`make test` does not, CI runs both")
    config.addinivalue_line(
        "markers", "long_run: an end-to-end test whose point is a long real run (a sweep signalled "
        "or killed, Ray, get_started, the biggest tutorials); `make test-full` runs these, "
        "`make test` does not, CI runs both")


def _xdist_group_suffix(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each ``xdist_group`` test the ``@<group>`` nodeid suffix ``--dist loadgroup``
    schedules by, where pytest-xdist's own suffix did not take.

    pytest-xdist 3.8 writes the suffix to ``item._nodeid``; pytest 9.2 derives ``nodeid`` from
    ``item._id`` instead, so the suffix is lost and every group's tests are spread over all
    workers (test_metric_agreement's session fixture was built on both). A no-op where
    pytest-xdist's suffix is in place, and outside ``--dist loadgroup`` workers."""
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import NodeId  # pylint: disable=import-outside-toplevel

    for item in items:
        names = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                        for mark in item.iter_markers("xdist_group")})
        suffix = "@" + "_".join(names)
        if names and not item.nodeid.endswith(suffix):
            item._id = NodeId.parse(item.nodeid + suffix)  # pylint: disable=protected-access


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own suffix (see _xdist_group_suffix)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow tests first, each group in collection order: `make test` runs on several
    pytest-xdist workers (``--dist loadgroup --no-loadscope-reorder`` hands tests out in this
    order), and a long test handed out last would run alone at the end."""
    _xdist_group_suffix(config, items)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def plan_cache():
    """One :class:`tvm_icca.PlanCache` for the session (searches in process), for tests
    that compile the same models on the same chips in several files or designs and assert
    nothing about the searches themselves. A cache answers exactly what a search would
    (tests/test_device_programs.py: test_public_plan_cache_shared_by_preload_designs); tests
    that use it share an ``xdist_group`` so that one worker holds their plans."""
    from tvm_icca.model_pass.plan_cache import PlanCache  # pylint: disable=import-outside-toplevel

    return PlanCache(jobs=1)


@pytest.fixture(scope="session")
def split_prefill(plan_cache):
    """A tiny Llama prefill (256 tokens) on a 64-core HBM chip of 24 KiB per core, where the
    fused attention does not fit whole and is cut into pieces: its programs planned once per
    session, without a preload schedule (``preload="off"``), with the session's
    ``plan_cache``. The planner's programs do not depend on the preload design (the Elk pass,
    :func:`tvm_icca.model_pass.elk_pass.schedule_preloads`, runs after them: test_piece_grouping
    checks that ``compile_programs`` gives what that call gives), so tests schedule these under
    each design instead of planning the model again. Its tests share the ``split_llama``
    ``xdist_group``."""
    # pylint: disable=import-outside-toplevel
    from runtime_sim.contract.presets import small_chip
    from tvm_icca.drivers.device_programs import compile_programs
    from tvm_icca.testing.host_masks import with_host_masks
    from tvm_icca.workloads import get_workload

    chip = small_chip(64, 24 * 1024).with_overrides(name="hbm-64", hbm_bandwidth=1e11,
                                                    hbm_controllers=2)
    # the causal mask kept as an [S, S] tensor passed by the host (as a mask computed from
    # an input stays): with it the fused attention does not fit whole
    workload = with_host_masks(get_workload("llama2-13b", tiny=True, batch=2, phase="prefill",
                                            seq_len=256))
    compiled = compile_programs(workload, chip, plan_cache=plan_cache, preload="off", jobs=1,
                                progress=False)
    return types.SimpleNamespace(chip=chip, workload=workload, compiled=compiled)


@pytest.fixture(scope="session")
def exprs() -> types.SimpleNamespace:
    """Builders of hand-written tensor expressions (see tvm_icca/testing/exprs.py)."""
    names = ("ax", "load", "op", "const", "matmul", "conv2d", "conv_out", "bias_add", "softmax",
             "layer_norm", "rms_norm", "row_sum", "matmul_bias_relu", "attention_expr")
    return types.SimpleNamespace(random_plan=_random_plan,
                                 **{name: getattr(builders, name) for name in names})
