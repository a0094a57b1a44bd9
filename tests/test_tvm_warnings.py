"""TVM's C++ warnings said once (tvm_icca.tvm_warnings): the embedding lookup of an LLM used to
print topi's "Fast mode segfaults" warning three times for one operator; now it and the other
warnings that mean nothing to the user (``MEANINGLESS``) are dropped, each reason checked."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tvm_icca.tvm_warnings import MEANINGLESS, TvmWarning, replay, tvm_warnings_once

#: A TVM warning that is shown (not in MEANINGLESS).
LINE = ("[20:33:48] /project/src/relax/transform/legalize_ops.cc:81: Warning: No legalization "
        "func for relax.example is found.\n")
FAST = ("[20:33:48] /project/include/tvm/topi/transform.h:1261: Warning: Fast mode segfaults "
        "when there are out-of-bounds indices. Make sure input indices are in bound\n")
POW = ("[12:38:05] /project/src/tirx/op/op.cc:275: Warning: Detected pow(x, y) where y >= 3, it "
       "is recommended to avoid this as it may lead to uninteded behaviors when x < 0.\n")


def test_replay_turns_log_lines_into_one_warning_and_keeps_other_output(capsys) -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        replay(LINE + "some other line\n" + LINE.replace("20:33:48", "20:33:49"))
    assert [type(w.message) for w in seen] == [TvmWarning]
    w = seen[0]
    assert str(w.message).startswith("No legalization") and "[20:" not in str(w.message)
    assert (w.filename, w.lineno) == ("/project/src/relax/transform/legalize_ops.cc", 81)
    assert capsys.readouterr().err == "some other line\n"


def test_a_filter_can_silence_them() -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        warnings.filterwarnings("ignore", category=TvmWarning)
        replay(LINE)
    assert not seen


def test_meaningless_warnings_are_dropped_and_others_kept(capsys) -> None:
    assert len(MEANINGLESS) == 2 and all(start and why for start, why in MEANINGLESS)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        replay(FAST + POW + LINE.replace("relax.example", "relax.other"))
    assert [str(w.message)[:16] for w in seen] == ["No legalization "]
    assert capsys.readouterr().err == ""


def test_an_llm_with_an_embedding_prints_no_tvm_warning(capfd) -> None:
    from tvm_icca.drivers.device_programs import compile_programs
    from tvm_icca.workloads import get_workload

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        with tvm_warnings_once():  # nested blocks share one capture
            compile_programs(get_workload("llama2-13b", tiny=True, num_layers=2), "ipu-mk2",
                             progress=False)
    assert not [w for w in seen if issubclass(w.category, TvmWarning)]
    # nothing of it reached descriptor 2 as TVM's raw log line
    assert "Warning: Fast mode" not in capfd.readouterr().err


def test_why_the_fast_take_warning_means_nothing_the_chip_checks_every_id() -> None:
    from runtime_sim.contract.errors import DeviceProgramError
    from runtime_sim.contract.expr import gather_rows

    assert list(gather_rows([0, 3, -1], 4, "fast")) == [0, 3, 3]
    with pytest.raises(DeviceProgramError, match="outside"):
        gather_rows([0, 4], 4, "fast")


def test_why_the_pow_warning_means_nothing_llvm_agrees_with_numpy() -> None:
    import tvm
    from tvm import relax

    x = np.array([-2.0, -0.5, 0.0, 1.5, -3.0], "float32")
    for exponent in (3.0, 4.0, 3.5):
        bb = relax.BlockBuilder()
        var = relax.Var("x", relax.TensorType((5,), "float32"))
        with bb.function("main", [var]):
            bb.emit_func_output(bb.emit(relax.op.power(var, relax.const(exponent, "float32"))))
        with tvm_warnings_once():  # as in our own legalizations: the warning is dropped
            vm = relax.VirtualMachine(tvm.compile(bb.get(), target="llvm"), tvm.cpu())
        with np.errstate(invalid="ignore"):
            want = x ** np.float32(exponent)
        np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), want,
                                   rtol=1e-6, equal_nan=True)
