"""TVM's C++ warnings said once (tvm_icca.tvm_warnings): the embedding lookup of an LLM used to
print topi's "Fast mode segfaults" warning three times for one operator."""

from __future__ import annotations

import warnings

from tvm_icca.tvm_warnings import TvmWarning, replay, tvm_warnings_once

LINE = ("[20:33:48] /project/include/tvm/topi/transform.h:1261: Warning: Fast mode segfaults "
        "when there are out-of-bounds indices. Make sure input indices are in bound\n")


def test_replay_turns_log_lines_into_one_warning_and_keeps_other_output(capsys) -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        replay(LINE + "some other line\n" + LINE.replace("20:33:48", "20:33:49"))
    assert [type(w.message) for w in seen] == [TvmWarning]
    w = seen[0]
    assert str(w.message).startswith("Fast mode segfaults") and "[20:" not in str(w.message)
    assert (w.filename, w.lineno) == ("/project/include/tvm/topi/transform.h", 1261)
    assert capsys.readouterr().err == "some other line\n"


def test_a_filter_can_silence_them() -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        warnings.filterwarnings("ignore", category=TvmWarning)
        replay(LINE)
    assert not seen


def test_an_llm_with_an_embedding_warns_once(capfd) -> None:
    from tvm_icca.drivers.timing_only import compile_programs
    from tvm_icca.workloads import get_workload

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        with tvm_warnings_once():  # nested blocks share one capture
            compile_programs(get_workload("llama2-13b", tiny=True, num_layers=2), "ipu-mk2",
                             progress=False)
    fast = [w for w in seen if issubclass(w.category, TvmWarning) and "Fast mode" in str(w.message)]
    assert len(fast) == 1
    # nothing of it reached descriptor 2 as TVM's raw log line
    assert "Warning: Fast mode" not in capfd.readouterr().err
