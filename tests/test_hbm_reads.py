"""Embedding tables in HBM / DRAM (runtime_sim.contract.hbm_reads; issue 41, item 3).

A lookup whose table waits off chip reads only the rows its ids pick: the table never has
to fit in SRAM. Checked on chips whose whole SRAM is smaller than the table: the functional
device is exact against numpy (every mode, repeated and out-of-range ids, with and without
an Elk preload stream, from HBM and from the host), and both executors count the same HBM
bytes, ``ids x row bytes`` (closed form); a tiny zoo LLM decode whose embedding does not fit
the chip's SRAM runs against TVM's CPU build.
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_icca
from runtime_sim import run_stats
from runtime_sim.contract.expr import TensorExpr
from runtime_sim.contract.hbm_reads import call_reads, read_key, run_hbm_bytes
from runtime_sim.contract.presets import small_chip
from runtime_sim.functional.device import get_device
from tvm_icca.lower.te_to_expr import extract_op
from tvm_icca.testing.device_runs import assert_metrics_agree, run_against_llvm
from tvm_icca.workloads import get_workload

V, H, T = 2048, 32, 6  # a 256 KiB float32 table, 6 ids
#: 4 cores of 16 KiB: 64 KiB of SRAM in all, a quarter of the table
HBM_CHIP = small_chip(4, 16 * 1024, hbm_bandwidth=1e10, hbm_controllers=2)
IDS = {"fast": [3, 3, V - 1, 0, 3, 5],  # repeated ids are read again
       "clip": [3, -3, V + 4, 0, 3, -V - 9],
       "wrap": [3, -3, V + 4, 0, 3, -V - 9]}


def _lookups(mode: str, lookups: int = 1) -> tvm.IRModule:
    """``take(table, ids_k) + x`` for each of ``lookups`` id tensors, summed."""
    bb = relax.BlockBuilder()
    table = relax.Var("table", relax.TensorType((V, H), "float32"))
    ids = [relax.Var(f"ids{k}", relax.TensorType((T,), "int64")) for k in range(lookups)]
    x = relax.Var("x", relax.TensorType((T, H), "float32"))
    with bb.function("main", [*ids, x, table]):
        with bb.dataflow():
            out = x
            for i in ids:
                row = bb.emit(relax.op.take(table, i, axis=0, mode=mode))
                out = bb.emit(relax.op.add(row, out))
            out = bb.emit_output(out)
        bb.emit_func_output(out)
    return bb.get()


def _run(mod: tvm.IRModule, hw, args: list[np.ndarray], **options):
    ex = tvm_icca.compile(mod, hw, resident=["table"], jobs=1, progress=False, **options)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(a) for a in args]).numpy()
    return out, tvm_icca.last_run_stats(), run_stats.last_run_timing()


def _take(table: np.ndarray, ids, mode: str) -> np.ndarray:
    return np.take(table, np.asarray(ids), axis=0, mode="raise" if mode == "fast" else mode)


@pytest.mark.parametrize("preload", ["off", "elk-full"])
@pytest.mark.parametrize("mode", ["fast", "clip", "wrap"])
def test_lookup_of_a_table_larger_than_the_chip(mode: str, preload: str) -> None:
    rng = np.random.default_rng(1)
    table = rng.standard_normal((V, H)).astype(np.float32)
    x = rng.standard_normal((T, H)).astype(np.float32)
    assert table.nbytes > HBM_CHIP.num_cores * HBM_CHIP.sram_bytes_per_core
    ids = np.asarray(IDS[mode], np.int64)
    out, stats, report = _run(_lookups(mode), HBM_CHIP, [ids, x, table], state="hbm",
                              preload=preload)
    np.testing.assert_array_equal(out, _take(table, ids, mode) + x)
    # HBM serves one row per id (repeats included), never the table: ids x row bytes
    rows = T * H * 4
    assert stats["hbm_bytes"] == report.hbm_bytes == rows
    (program,) = get_device().last_run.programs
    assert {d.name: d.source for d in program.inputs}[program.ops[0].input_names[0]] == "hbm"
    device_ops = [op for region in stats["regions"] for op in region["ops"]]
    assert [op.get("hbm_bytes", 0) for op in device_ops] == [op.hbm_bytes for op in report.per_op]
    assert stats["peak_sram_bytes_per_core"] <= HBM_CHIP.sram_bytes_per_core


def test_two_lookups_read_their_own_rows() -> None:
    """Two lookups of one HBM table with other ids read other rows: both count
    (runtime_sim.contract.hbm_reads.read_key), on both executors."""
    rng = np.random.default_rng(2)
    table = rng.standard_normal((V, H)).astype(np.float32)
    x = rng.standard_normal((T, H)).astype(np.float32)
    a, b = np.arange(T), np.arange(T)[::-1] + 100
    out, stats, report = _run(_lookups("fast", 2), HBM_CHIP, [a, b, x, table], state="hbm",
                              preload="off")
    np.testing.assert_allclose(out, table[a] + table[b] + x, rtol=1e-6)
    assert stats["hbm_bytes"] == report.hbm_bytes == 2 * T * H * 4


def test_lookup_from_the_host_link() -> None:
    """A chip without HBM and state on the host: the host sends the rows, not the table."""
    hw = small_chip(4, 16 * 1024)
    rng = np.random.default_rng(3)
    table = rng.standard_normal((V, H)).astype(np.float32)
    x = rng.standard_normal((T, H)).astype(np.float32)
    ids = np.asarray(IDS["wrap"], np.int64)
    out, stats, report = _run(_lookups("wrap"), hw, [ids, x, table], state="host")
    np.testing.assert_array_equal(out, _take(table, ids, "wrap") + x)
    assert stats["hbm_bytes"] == report.hbm_bytes == 0
    # the rows, the ids and x: each distinct box once per chip (one chip here)
    assert report.host_in_bytes < table.nbytes
    assert report.host_in_bytes <= T * H * 4 + ids.nbytes + x.nbytes


def test_read_keys_and_run_totals() -> None:
    """Keys: a tensor, a split piece's block of it, a lookup's rows by its ids; a call counts
    each key's largest read, a run sums its calls."""
    bb = relax.BlockBuilder()
    table = relax.Var("table", relax.TensorType((V, H), "float32"))
    ids = relax.Var("ids", relax.TensorType((T,), "int64"))
    with bb.function("f", [table, ids]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.take(table, ids, axis=0))
        bb.emit_func_output(out)
    expr: TensorExpr = extract_op(bb.get()["f"]).expr
    assert read_key(expr, 0, ("emb", "tok")) == "emb[tok]"
    assert read_key(expr, 1, ("emb", "tok")) == "tok"
    assert expr.read_bytes(0) == T * H * 4 and expr.inputs[0].nbytes == V * H * 4
    calls = [call_reads([{"w": 10.0, "emb[tok]": 4.0}, {"w": 6.0, "emb": 40.0}]),
             call_reads([{"w": 10.0}])]
    assert calls[0] == {"w": 10.0, "emb[tok]": 4.0, "emb": 40.0}
    assert run_hbm_bytes(calls) == 64.0


def test_tiny_llm_decode_whose_embedding_exceeds_the_sram() -> None:
    """Llama2's tiny decode (a 32 KiB float32 embedding) on 4 cores of 6 KiB usable SRAM
    with HBM: exact against TVM's CPU build, one value per metric on both executors, and
    HBM reads every weight and cache once but only the batch's row of the embedding."""
    hw = small_chip(4, 8 * 1024, shift_buffer_bytes=2048, hbm_bandwidth=1e11, hbm_controllers=2)
    workload = get_workload("llama2-7b", tiny=True, batch=1, context=8)
    cfg = workload.config
    table = cfg["vocab"] * cfg["hidden"] * 4
    assert table > hw.num_cores * hw.usable_sram_bytes
    stats, report = run_against_llvm(workload, hw, "elk-full")
    programs = get_device().last_run.programs
    assert_metrics_agree(programs, stats, report, "llama2-7b tiny, embedding in HBM")
    in_hbm = sum(d.nbytes for p in programs for d in p.inputs if d.source == "hbm")
    rows = cfg["batch"] * cfg["hidden"] * 4
    assert stats["hbm_bytes"] == report.hbm_bytes == in_hbm - table + rows
