"""
Compile an ONNX model for an ICCA chip
======================================

This walkthrough takes a small ONNX model through tvm_icca step by step: import with TVM's
ONNX frontend, partition for the ICCA backend, look at the T10 execution plans chosen for
each offloaded operator, compile with ``tvm.compile(mod, target="icca")``, run on the
simulated device and read its statistics.
"""

# %%
# Build a model
# -------------
# ``tvm_icca.testing`` builds small ONNX models with independent numpy references. Any ONNX
# file works the same way (``tvm_icca.load_onnx("model.onnx")``).
import numpy as np
import tvm
from tvm import relax

import tvm_icca
from tvm_icca.testing import mlp

case = mlp(batch=16, sizes=(64, 128, 32))
mod = tvm_icca.load_onnx(case.model)

# %%
# Choose a chip
# -------------
# The default chip is the IPU Mk2 preset (1,472 cores, 624 KiB each). Any field can be
# overridden; here a 16-core chip with 32 KiB per core makes the plans interesting.
hw = tvm_icca.small_chip(16, 32 * 1024)
print(hw.name, hw.num_cores, "cores,", hw.sram_bytes_per_core, "bytes of SRAM per core")

# %%
# Partition
# ---------
# ``partition_for_icca`` follows TVM's BYOC convention: patterns from the pattern registry,
# ``FuseOpsByPattern`` and ``MergeCompositeFunctions``. Elementwise epilogues (bias, ReLU)
# are fused into the matmul composites.
partitioned = tvm_icca.partition_for_icca(mod, hw=hw)
report = tvm_icca.partition_report(partitioned)
print(tvm_icca.partition.partitioner.format_report(report))

# %%
# Inspect the execution plans
# ---------------------------
# One model-level pass, ``plan_device_programs``, turns every region into a device program
# (``tvm.compile`` runs the same pass). For each operator: its tensor expression (from TVM's
# own TE compute), the operator partition F_op, and per tensor the rTensor factors.
from runtime_sim.contract.layout import OpLayout
from tvm_icca.planning import programs_in_call_order
from tvm_icca.plans import rotating_tensors

planned = tvm_icca.plan_device_programs(hw)(partitioned)
for program in programs_in_call_order(planned):
    print(program.region, [(d.name, d.source) for d in program.inputs])
    for op in program.ops:
        layout = OpLayout(op.expr, op.plan)
        print(op.expr)
        print("   F_op", dict(op.plan.op_partition), "steps", layout.steps,
              "bytes/core", layout.memory_bytes_per_core())
        for rt in rotating_tensors(layout):
            print("     ", rt.name, "f_s", rt.spatial_partition_factor,
                  "f_t", rt.temporal_partition_factor, "rp", rt.rotating_pace)

# %%
# Compile and run
# ---------------
with tvm_icca.use_hardware(hw):
    executable = tvm.compile(partitioned, target="icca")
vm = relax.VirtualMachine(executable, tvm.cpu())
out = vm["main"](tvm.runtime.tensor(case.inputs["x"])).numpy()
np.testing.assert_allclose(out, case.reference(case.inputs)[0], rtol=1e-4, atol=1e-5)

stats = tvm_icca.last_run_stats()
print({k: stats[k] for k in ("regions_executed", "cores_used", "peak_sram_bytes_per_core",
                             "shift_bytes", "steps", "simulated_s")})
assert stats["peak_sram_bytes_per_core"] <= hw.sram_bytes_per_core
