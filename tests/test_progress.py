"""The progress policy (tvm_icca.progress): delay, terminal-only default, off; and its phases
through compile, Elk and simulation. No timing assertions: the delays used are 0 (shown at
once) or an hour (never reached)."""

from __future__ import annotations

import io

import pytest

from runtime_sim.contract.errors import IccaError
from runtime_sim.contract.presets import preset
from tvm_icca.elk.designs import plan_preloads
from tvm_icca.elk.synthetic import SRAM, synthetic_llm
from tvm_icca.elk.tradeoffs import ElkMachine
from tvm_icca.model_pass import CompileOptions
from tvm_icca.progress import DEFAULT_DELAY_S, NO_PROGRESS, Progress, as_progress

HOUR = 3600.0


class _Terminal(io.StringIO):
    """A stream that says it is a terminal (tqdm's ``disable=None`` asks ``isatty``)."""

    def isatty(self) -> bool:
        return True


def _run_phase(progress: Progress, steps: int = 3) -> None:
    with progress.phase("working", unit="op") as phase:
        phase.add(steps)
        for k in range(steps):
            phase.step(f"item {k}")


def test_defaults_and_coercion() -> None:
    assert Progress().show is None and Progress().delay_s == DEFAULT_DELAY_S == 1.0
    assert as_progress(None) == Progress() and as_progress(True) == Progress()
    assert as_progress(False) is NO_PROGRESS and NO_PROGRESS.show is False
    custom = Progress(show=True, delay_s=0.5)
    assert as_progress(custom) is custom
    for bad in ("yes", 1, 0.0):
        with pytest.raises(IccaError, match="progress must be"):
            as_progress(bad)
    with pytest.raises(IccaError, match="delay_s"):
        Progress(delay_s=-1.0)
    with pytest.raises(IccaError, match="show"):
        Progress(show="always")  # type: ignore[arg-type]


def test_shown_at_once_without_delay() -> None:
    out = io.StringIO()
    _run_phase(Progress(show=True, delay_s=0.0, file=out))
    text = out.getvalue()
    assert text.startswith("\rworking:") and "op" in text


def test_a_long_first_unit_shows_the_phase_once_the_delay_has_passed() -> None:
    """A phase whose first unit has not completed yet still shows its line after the delay
    (tqdm's own delay waited for the first completed unit), and redraws it while it runs."""
    import threading

    out = io.StringIO()
    shown = threading.Event()
    with Progress(show=True, delay_s=0.05, file=out).phase("planning", unit="op",
                                                           total=3) as phase:
        for _ in range(200):  # up to 10 s on a loaded machine; no unit completes meanwhile
            if "planning:" in out.getvalue():
                shown.set()
                break
            shown.wait(0.05)
        assert shown.is_set() and phase.done == 0
        assert "0/3" in out.getvalue()
        phase.step()
    assert "planning:" in out.getvalue()


def test_nothing_before_the_delay() -> None:
    out = io.StringIO()
    _run_phase(Progress(show=True, delay_s=HOUR, file=out), steps=50)
    assert out.getvalue() == ""


def test_default_shows_only_on_a_terminal() -> None:
    pipe, terminal = io.StringIO(), _Terminal()
    _run_phase(Progress(delay_s=0.0, file=pipe))
    _run_phase(Progress(delay_s=0.0, file=terminal))
    assert pipe.getvalue() == ""
    assert "working" in terminal.getvalue()


def test_off_shows_nothing_even_on_a_terminal() -> None:
    terminal = _Terminal()
    _run_phase(Progress(show=False, delay_s=0.0, file=terminal))
    assert terminal.getvalue() == ""


def test_phase_total_grows_and_counts() -> None:
    with Progress(show=False).phase("x") as phase:
        assert phase.total is None and phase.done == 0
        phase.add(4)
        phase.add(2)
        phase.step()
        phase.step(units=3)
        assert phase.total == 6 and phase.done == 4


def test_compile_options_carry_progress_without_changing_equality() -> None:
    assert CompileOptions(progress=False).progress is NO_PROGRESS
    assert CompileOptions().progress == Progress()
    # a presentation choice: the same compilation either way
    assert CompileOptions(progress=False) == CompileOptions()
    with pytest.raises(IccaError, match="progress must be"):
        CompileOptions(progress="quiet")  # type: ignore[arg-type]


def test_elk_search_reports_every_candidate_and_decides_the_same() -> None:
    # two layers (43 operators) reach every stage of the search, as four do, in half the time
    ops = synthetic_llm(2, seed=3)
    machine = ElkMachine(SRAM, False)
    stages: list[str | None] = []
    quiet = plan_preloads(ops, machine, "elk-full")
    loud = plan_preloads(ops, machine, "elk-full", on_step=stages.append)
    assert (loud.exec_choice, loud.preload_choice, loud.preload_order, loud.total_s) == (
        quiet.exec_choice, quiet.preload_choice, quiet.preload_order, quiet.total_s)
    # every candidate estimated reports, named by the stage of the search that made it
    assert len(stages) > 10
    assert {"refining", "static sweep"} <= set(stages)
    assert any(s is not None and s.startswith("screening") for s in stages)


def test_compile_and_simulate_phases_reach_the_stream() -> None:
    from tvm_icca.drivers.device_programs import compile_programs
    from tvm_icca.workloads import get_workload

    out = io.StringIO()
    shown = Progress(show=True, delay_s=0.0, file=out)
    # one chip with HBM: the phases are those of any chip with HBM, planned sooner than a pod's
    chip = preset("ipu-mk2", num_cores=64, hbm_bandwidth=1e12, hbm_controllers=4)
    model = compile_programs(get_workload("llama2-13b", tiny=True, num_layers=2), chip,
                             progress=shown)
    report = model.simulate(progress=shown)
    text = out.getvalue()
    for phase in ("planning operators", "trade-off tables", "preload schedule (elk-full)",
                  "timing"):
        assert phase in text, phase
    silent = io.StringIO()
    again = compile_programs(get_workload("llama2-13b", tiny=True, num_layers=2), chip,
                             progress=Progress(show=True, delay_s=HOUR, file=silent))
    assert silent.getvalue() == ""
    assert again.simulate(progress=False).total_s == report.total_s
