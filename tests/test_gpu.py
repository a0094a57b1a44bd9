"""The GPU reference (runtime_sim/contract/gpu.py, runtime_sim/gpu/roofline.py): closed forms
of one operator's estimate, the L2 rule, blocked-GEMM re-reads, the presets' cited numbers and
bad input."""

from __future__ import annotations

import pytest

from runtime_sim.contract.energy import ActionCounts, run_energy
from runtime_sim.contract.errors import InvalidHardwareSpecError
from runtime_sim.contract.gpu import GPU_PRESET_NAMES, GpuSpec, gpu_preset
from runtime_sim.contract.metrics import METRICS, OP_METRICS
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.presets import small_chip
from runtime_sim.contract.stream import input_sources
from runtime_sim.gpu import estimate_gpu
from runtime_sim.gpu.roofline import blocked_gemm_rereads, op_traffic
from tvm_icca.hardware_choice import resolve_chip_or_gpu, resolve_hardware
from tvm_icca.testing import exprs
from tvm_icca.testing.timing_programs import one_op_program, two_weight_program

HW = small_chip(16)
PLAN = ExecutionPlan({"m": 1, "n": 1}, ({}, {}, {}))


def _gpu(**fields) -> GpuSpec:
    """Round numbers, so that every expectation below is a closed form."""
    base = dict(name="toy", sms=10, tensor_flops=1e12, fp32_flops=1e11, hbm_bandwidth=1e9,
                hbm_bytes=1e9, l2_bytes=1e9, board_power_w=100.0, tensor_efficiency=0.5,
                fp32_efficiency=0.25, hbm_efficiency=0.5, launch_s=1e-6,
                tensor_pj_per_flop=2.0, fp32_pj_per_flop=5.0, hbm_pj_per_byte=10.0, static_w=3.0)
    return GpuSpec(**{**base, **fields})


def test_one_matmul_by_hand():
    expr = exprs.matmul(64, 128, 32, dtype="float16")
    report = estimate_gpu([one_op_program(expr, PLAN, HW)], _gpu())
    flops = 2 * 64 * 128 * 32
    nbytes = (64 * 128 + 128 * 32 + 64 * 32) * 2  # A, B read once, C written once
    hbm_s = nbytes / (1e9 * 0.5)
    assert flops / (1e12 * 0.5) < hbm_s  # HBM-bound
    (row,) = report.rows
    assert (row.flops, row.hbm_traffic_bytes, row.bound_by) == (flops, nbytes, "hbm")
    assert report.total_s == pytest.approx(hbm_s + 1e-6)
    assert report.roofline_s == pytest.approx(nbytes / 1e9)  # 100% of the bandwidth, no launch
    assert report.roofline_s < report.total_s
    # the one energy formula, fed the GPU's counts: tensor FLOPs, HBM bytes, static power
    expected = flops * 2e-12 + nbytes * 10e-12 + 3.0 * report.total_s
    assert report.energy.energy_j == pytest.approx(expected)
    again = run_energy(ActionCounts.of({"float16": flops}, hbm_bytes=nbytes),
                       _gpu().energy_table(), report.total_s, cores=0, chips=1)
    assert report.energy.energy_j == pytest.approx(again.energy_j)


def test_compute_bound_and_float32_on_the_cuda_cores():
    # a large K on a fast memory: compute-bound; float32 runs at the FP32 rate, not the tensor one
    gpu = _gpu(hbm_bandwidth=1e15)
    for dtype, rate in (("float16", 1e12 * 0.5), ("float32", 1e11 * 0.25)):
        expr = exprs.matmul(64, 4096, 64, dtype=dtype)
        (row,) = estimate_gpu([one_op_program(expr, PLAN, HW)], gpu).rows
        assert row.bound_by == "flops"
        assert row.time_s == pytest.approx(2 * 64 * 4096 * 64 / rate + 1e-6)


def test_the_l2_rule_reads_the_previous_output_from_l2():
    program, _ = two_weight_program(HW)  # H = X @ W0, Y = H @ W1, 64 x 64 float32 each
    tensor = 64 * 64 * 4
    report = estimate_gpu([program], _gpu())
    # X, W0 read and H written; then W1 read (H from L2) and Y written
    assert [r.hbm_traffic_bytes for r in report.rows] == [3 * tensor, 2 * tensor]
    mm1 = program.ops[1]
    sources = input_sources(program, has_hbm=True)[1]
    assert op_traffic(mm1, sources, None, 1e9)[0] == 3 * tensor  # not the previous op's: read
    # an L2 smaller than H: H goes back to HBM and is read again
    small = estimate_gpu([program], _gpu(l2_bytes=tensor - 1))
    assert small.rows[1].hbm_traffic_bytes - small.rows[1].reread_bytes == 3 * tensor


def test_a_gemm_larger_than_l2_rereads_its_operands():
    l2 = 3 * 64 * 64 * 2  # three 64 x 64 float16 tiles: b = 64
    big = exprs.matmul(512, 256, 512, dtype="float16")
    a = b = 512 * 256 * 2
    assert blocked_gemm_rereads(big, l2) == a * (512 // 64 - 1) + b * (512 // 64 - 1)
    (row,) = estimate_gpu([one_op_program(big, PLAN, HW)], _gpu(l2_bytes=l2)).rows
    assert row.reread_bytes == a * 7 + b * 7
    assert row.hbm_traffic_bytes == a + b + 512 * 512 * 2 + row.reread_bytes
    # a decode step's 1 x K by K x N product reads its weights once, only the row again
    gemv = exprs.matmul(1, 4096, 4096, dtype="float16")
    assert blocked_gemm_rereads(gemv, l2) == 4096 * 2 * (4096 // 64 - 1)
    # fits: no re-read
    assert blocked_gemm_rereads(big, 10 * (a + b)) == 0
    assert blocked_gemm_rereads(exprs.softmax(512, 512), l2) == 0  # not a product


def test_report_keys_are_in_the_glossary_and_say_estimate():
    expr = exprs.matmul(64, 128, 32, dtype="float16")
    report = estimate_gpu([one_op_program(expr, PLAN, HW)], gpu_preset("h100"), model="m")
    data = report.to_dict(per_op=True)
    assert sorted(k for k in data if k not in METRICS) == []
    assert sorted(k for r in data["per_op"] for k in r if k not in METRICS and k not in OP_METRICS) == []
    assert "not a measurement" in data["estimate_kind"]
    text = report.table()
    assert "not a measurement" in text and "roofline" in text and "h100" in text


def test_presets_carry_their_cited_numbers():
    a100, h100, b200 = (gpu_preset(n) for n in ("a100", "h100", "b200"))
    assert GPU_PRESET_NAMES == ("a100", "h100", "b200")
    assert (a100.tensor_flops, a100.hbm_bandwidth, a100.l2_bytes, a100.board_power_w) == \
        (312e12, 2039e9, 40 * 2**20, 400.0)
    assert (h100.tensor_flops, h100.hbm_bandwidth, h100.hbm_bytes, h100.l2_bytes) == \
        (989.4e12, 3350e9, 80e9, 50 * 2**20)
    assert (b200.tensor_flops, b200.hbm_bandwidth, b200.hbm_bytes, b200.board_power_w) == \
        (2250e12, 8000e9, 180e9, 1000.0)
    for gpu in (a100, h100, b200):
        # every efficiency and energy is sourced or marked assumed
        assert {"tensor_efficiency", "launch_s", "static_w"} <= set(gpu.assumed_fields)
        # busy at its efficiencies on both units and HBM at once, it stays under board power
        watts = (gpu.tensor_flops * gpu.tensor_efficiency * gpu.tensor_pj_per_flop * 1e-12
                 + gpu.hbm_bandwidth * gpu.hbm_efficiency * gpu.hbm_pj_per_byte * 1e-12
                 + gpu.static_w)
        assert watts < gpu.board_power_w


@pytest.mark.parametrize("fields, match", [
    ({"hbm_bandwidth": -1.0}, "hbm_bandwidth=-1.0 must be positive"),
    ({"tensor_efficiency": 0.0}, r"tensor_efficiency=0.0 must be a fraction of the peak in \(0, 1\]"),
    ({"l2_bytes": float("nan")}, "l2_bytes=nan must be a finite number"),
    ({"sms": 1.5}, "sms=1.5 must be a positive integer"),
    ({"static_w": -3}, "static_w=-3 must be 0"),
    ({"assumed": {"clock": "why"}}, "assumed="),
])
def test_bad_specs_name_the_field(fields, match):
    with pytest.raises(InvalidHardwareSpecError, match=match):
        _gpu(**fields)


def test_bad_names_and_overrides():
    with pytest.raises(InvalidHardwareSpecError, match="did you mean 'h100'"):
        gpu_preset("h10")
    with pytest.raises(InvalidHardwareSpecError, match="unknown GpuSpec field"):
        gpu_preset("a100", clock_hz=1e9)
    assert gpu_preset("A100", hbm_efficiency=0.5).hbm_efficiency == 0.5
    h100 = gpu_preset("h100")
    assert GpuSpec.from_dict(h100.to_dict()) == h100  # round trip, assumed marks kept
    assert GpuSpec.from_dict(h100.to_dict()).assumed_fields == h100.assumed_fields
    assert "hbm_efficiency" not in gpu_preset("h100", hbm_efficiency=0.5).assumed_fields
    # a GPU is a reference, not a chip to compile for: refused where a chip is needed
    with pytest.raises(InvalidHardwareSpecError, match="GPU preset, not an ICCA chip"):
        resolve_hardware("h100")
    assert resolve_chip_or_gpu("B200").name == "b200"
    assert resolve_chip_or_gpu("ipu-mk2").name == "ipu-mk2"
