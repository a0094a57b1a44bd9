"""tvm_icca.dse.columns: per-token columns, cost proxies and Pareto marks of results rows;
tvm_icca.workloads.tokens_per_run, the one rule they divide by."""

from __future__ import annotations

import itertools

import pytest

from runtime_sim.contract.errors import InvalidWorkloadError, UnknownWorkloadError
from runtime_sim.contract.metrics import DSE_METRICS, METRICS
from tvm_icca.dse.columns import derived_rows, per_token, results_frame
from tvm_icca.workloads import get_workload, tokens_per_run


@pytest.mark.parametrize("name, args, tokens", [
    ("llama2-7b", {"batch": 32, "context": 2048}, 32),             # decode: one per sequence
    ("llama2-7b", {"batch": 2, "seq_len": 64}, 2),                 # seq_len: decode's context
    ("opt-1.3b", {"batch": 4, "phase": "prefill", "seq_len": 100}, 400),
    ("gemma2-27b", {"phase": "train", "seq_len": 16}, 16),          # batch defaults to 1
    ("llama2-13b", {"batch": 3, "phase": "prefill"}, 3 * 2048),    # the builder's prompt
    ("nerf", {}, 4096),                                            # its default batch
    ("bert-large", {"batch": 8, "seq_len": 128}, 8),               # samples, not tokens
    ("resnet50", {"batch": 2}, 2),
    ("dit-xl", {"batch": 5}, 5),                                   # an alias
])
def test_tokens_per_run(name, args, tokens):
    assert tokens_per_run(name, args) == tokens


def test_tokens_per_run_agrees_with_the_built_config():
    # the rule without building, against the config a built (tiny) workload reports
    for name, args in (("llama2-7b", {"batch": 3, "context": 8}),
                       ("llama2-7b", {"batch": 2, "phase": "prefill", "seq_len": 8}),
                       ("opt-1.3b", {"batch": 2, "phase": "train", "seq_len": 4}),
                       ("resnet18", {"batch": 2}), ("bert-large", {"batch": 2})):
        config = get_workload(name, tiny=True, **args).config
        expected = config["batch"] * (config["seq_len"] if config.get("phase") in
                                      ("prefill", "train") else 1)
        assert tokens_per_run(name, {**args, "tiny": True}) == expected


def test_tokens_per_run_refuses_what_the_zoo_refuses():
    with pytest.raises(UnknownWorkloadError):
        tokens_per_run("gpt-5")
    with pytest.raises(InvalidWorkloadError, match="seq_len"):
        tokens_per_run("llama2-7b", {"phase": "prefill", "context": 8})
    with pytest.raises(InvalidWorkloadError, match="image"):
        tokens_per_run("llama2-7b", {"image": 8})


def _row(**extra):
    row = {"key": "k", "inputs": ["workload", "batch", "design"], "workload": "llama2-7b",
           "batch": 8, "design": "static", "status": "ok", "total_s": 4e-3}
    row.update(extra)
    return row


def test_per_token():
    assert per_token(_row()) == {"tokens_per_run": 8, "time_per_token_s": 5e-4}
    # with an energy: per token; without one (a chip without an energy model) none is made up
    assert per_token(_row(energy_j=0.8))["energy_per_token_j"] == pytest.approx(0.1)
    assert "energy_per_token_j" not in per_token(_row(energy_j=None))
    # workload_args (newer rows) win over the input columns
    row = _row(workload_args={"batch": 2, "phase": "prefill", "seq_len": 10})
    assert per_token(row)["tokens_per_run"] == 20
    # a stored count is used as it is; an ONNX file has no tokens; a failed row has no time
    assert per_token(_row(tokens_per_run=3))["time_per_token_s"] == pytest.approx(4e-3 / 3)
    assert per_token(_row(workload="enc.onnx")) == {}
    assert per_token({**_row(status="failed"), "total_s": None}) == {"tokens_per_run": 8}


def test_derived_rows_cost_and_fronts():
    chips = {"c1": {"sram_bytes_per_core": 1000, "num_cores": 4, "hbm_bytes_per_chip": 0,
                    "num_chips": 1}}
    rows = []
    # (time, energy, sram per core) -> front by hand: a and b trade time for energy; c is
    # dominated by a; d has no energy; e is another workload (its own front)
    for name, total, energy, sram in (("a", 1.0, 4.0, 2000), ("b", 2.0, 2.0, 1000),
                                      ("c", 1.5, 5.0, 2000), ("d", 0.5, None, 4000)):
        rows.append(_row(key=name, total_s=total, energy_j=energy, sram_bytes_per_core=sram,
                         num_cores=4, inputs=["workload", "batch", "design",
                                              "sram_bytes_per_core", "num_cores"]))
    rows.append(_row(key="e", batch=1, total_s=9.0, energy_j=9.0, chip_digest="c1"))
    rows.append(_row(key="f", status="does_not_fit", total_s=None))
    out = {r["key"]: r for r in derived_rows(rows, chips)}
    assert [out[k]["pareto"] for k in "abcdef"] == [True, True, False, False, True, False]
    assert out["a"]["system_sram_bytes"] == 8000 and out["e"]["system_sram_bytes"] == 4000
    assert out["e"]["system_hbm_bytes"] is None  # 0: not modelled, not zero bytes
    # against SRAM: d is fastest but has the most; b has the least
    assert [out[k]["pareto_sram"] for k in "abcd"] == [True, True, False, True]
    assert out["d"]["energy_per_token_j"] is None and out["a"]["energy_per_token_j"] == 0.5
    assert out["a"]["workload_instance"] != out["e"]["workload_instance"]
    # every derived column is defined in the glossary
    derived = set(out["a"]) - set(rows[0])
    assert derived <= set(DSE_METRICS) | set(METRICS) | {"num_cores"}


def test_results_frame_is_the_rows_as_pandas():
    pandas = pytest.importorskip("pandas")
    rows = [_row(key=str(i), total_s=t, remainder={"sync": t / 2}) for i, t in
            zip(itertools.count(), (1.0, 2.0))]
    frame = results_frame(rows)
    assert isinstance(frame, pandas.DataFrame) and list(frame["key"]) == ["0", "1"]
    assert list(frame["time_per_token_s"]) == [1.0 / 8, 2.0 / 8]
    assert frame["remainder"][0] == '{"sync": 0.5}'  # a mapping as JSON text
    assert list(frame["pareto_sram"]) == [False, False]  # no SRAM size known: no front


def test_a_gpu_row_costs_the_gpu_not_the_chip_it_was_partitioned_for():
    # a GPU point records the digest of the ICCA chip its model was partitioned for; its cost
    # proxies are the GPU's own (runtime_sim.contract.gpu)
    from runtime_sim.contract.gpu import gpu_preset

    chips = {"c1": {"sram_bytes_per_core": 1000, "num_cores": 4, "hbm_bytes_per_chip": 10,
                    "num_chips": 1}}
    row = _row(key="g", hardware="h100", design="gpu", total_s=1.0, energy_j=1.0,
               chip_digest="c1")
    out = derived_rows([row], chips)[0]
    h100 = gpu_preset("h100")
    assert out["system_sram_bytes"] == h100.l2_bytes != 4000
    assert out["system_hbm_bytes"] == h100.hbm_bytes and out["num_cores"] == h100.sms
