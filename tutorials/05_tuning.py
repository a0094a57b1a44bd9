"""
Tune execution plans by measurement
===================================

This tutorial teaches how to tune a model's execution plans on the simulated chip and
compile with the results: what a tuning session measures, what its records are (ordinary
TVM meta_schedule tuning records), how ``tvm_icca.use_database`` makes the compiler use
them, when it cannot, and how to tell whether tuning paid off.

Every operator on the chip runs a compute-shift *execution plan* (T10 §4.2): how its
iteration space is split over cores (the operator partition ``F_op``), how each tensor is
further split into pieces that rotate between cores step by step (the temporal factors),
and in which loop order. The compiler picks one plan per operator with an analytic cost
model. A tuning session instead *measures* candidate plans on the timing simulator, ranks
the candidates still to measure with a learned cost model (XGBoost behind meta_schedule's
``PyCostModel``, refitted as measurements come in), and keeps every measurement.
"""

# %%
# Sizes
# -----
# The full size tunes for the IPU Mk2 preset (1,472 cores) with up to 64 measurements per
# operator; a session stops an operator earlier when three batches of measurements in a row
# found nothing faster. The small size (``TVM_ICCA_TUTORIAL_SIZE=small``, used by the test
# suite) tunes for a 16-core chip with 64 KiB per core, with 8 measurements per operator.
import os

SIZE = os.environ.get("TVM_ICCA_TUTORIAL_SIZE", "full")
TRIALS = 8 if SIZE == "small" else 64

# %%
# The model and the chip
# ----------------------
# The model is the encoder layer that ships with the package (tutorial 1 shows what is in
# it): LayerNorm, 4-head self-attention and a GELU feed-forward over 32 tokens of width 64.
import json
import tempfile
from importlib import resources

import matplotlib.pyplot as plt
import numpy as np
import onnx
import tvm
from onnx.reference import ReferenceEvaluator
from tvm import relax

import tvm_icca
from runtime_sim.run_stats import last_run_timing

model_path = str(resources.files("tvm_icca") / "data" / "encoder_layer.onnx")
mod = tvm_icca.load_onnx(model_path)
hw = tvm_icca.small_chip(16, 64 * 1024) if SIZE == "small" else tvm_icca.preset("ipu-mk2")
print(f"{hw.name}: {hw.num_cores} cores, {hw.sram_bytes_per_core} bytes of SRAM per core")

# %%
# Tune
# ----
# :func:`tvm_icca.tune` compiles the model once to find its operators, then tunes each
# distinct one (a *task*; operators of the same shape and kind share one), heaviest first.
# Per task it first measures the compiler's own plan, the time to beat, then batches of
# candidates from the operator's complete plan space. The records go to ``work_dir``; a
# later session with the same directory resumes from them. (``jobs=2`` would measure in two
# worker processes; from a script that needs the usual ``if __name__ == "__main__":`` guard
# of Python's multiprocessing, so this tutorial measures in-process.)
work_dir = tempfile.mkdtemp(prefix="icca_tuning_")
summary = tvm_icca.tune(mod, work_dir, hw=hw, max_trials=TRIALS, progress=False)
print(summary.table())

# %%
# One row per task: its kind and iteration extents, and the first operator of the model with
# that structure (``op13`` is the 14th operator of the region); ``runs``, how often the
# model runs it; ``trials``, the plans measured; ``untuned``, the measured time of the
# compiler's own plan; ``best``, the fastest plan measured (both in the unit the table's
# largest time reads best in, named in the header); ``gain``, their ratio. The last line
# weighs each task by its runs: the operator time of one model call, before and after. A gain of 1.00x means the compiler's analytic choice was already the fastest plan
# the session found.
gains = [r.gain for r in summary.results]
print(f"{sum(g > 1 for g in gains)} of {len(gains)} tasks have a faster plan than the "
      f"compiler's; the largest gain is {max(gains):.2f}x")
assert all(r.best_s <= r.untuned_s for r in summary.results)

# %%
# Whether tuning finds anything depends on the chip and the session. On the IPU Mk2 preset,
# whose cores run float32 at a quarter of their float16 rate, the compiler's analytic choice
# has been the fastest plan measured for every task of this model; on the 16-core chip of
# the small size, one matmul runs 1.5x faster with a measured plan. Where no task gained,
# the records below still describe every measurement, and compiling with them changes no
# operator: the sections that follow then show an empty list and a 1.00x change.

fig, ax = plt.subplots(figsize=(8, 4))
order = np.arange(len(summary.results))
ax.bar(order - 0.2, [r.untuned_s * 1e6 for r in summary.results], 0.4, label="compiler's plan")
ax.bar(order + 0.2, [r.best_s * 1e6 for r in summary.results], 0.4, label="best measured")
ax.set_xticks(order, [r.task for r in summary.results], rotation=60,
              ha="right", fontsize=7)
ax.set_ylabel("measured time per run (us)")
ax.set_title(f"Tuning the encoder layer on {hw.name}, {TRIALS} trials per task at most")
ax.legend()
fig.tight_layout()
plt.show()

# %%
# The records
# -----------
# The work directory holds meta_schedule's two JSON files, so TVM's own ``JSONDatabase``
# reads it. Each record is a ``TuningRecord``: its workload is the operator's TIR function,
# its trace annotates the operator's output block with ``icca.plan`` (the plan as JSON, with
# the chip and the operator's kind), ``run_secs`` holds the simulated time, and ``target``
# names the chip as its ``model``.
from tvm.s_tir.meta_schedule.database import JSONDatabase

database = JSONDatabase(work_dir=work_dir)
records = database.get_all_tuning_records()
print(sorted(os.listdir(work_dir)))
print(len(records), "records; target of the first:", records[0].target)
assert len(records) == summary.committed  # a fresh directory: this session's measurements


def icca_plan(record) -> dict:
    """The ``icca.plan`` annotation of a record's trace, as a dict."""
    for inst in record.trace.insts:
        if inst.kind.name == "Annotate" and list(inst.attrs) == ["icca.plan"]:
            return json.loads(str(inst.inputs[1]))
    raise ValueError("not an ICCA record")


# Per task: how much the measured plans differ. The spread (slowest / fastest) shows how much
# the choice of plan matters for that operator.
by_task: dict[str, list] = {}
for record in records:
    by_task.setdefault(icca_plan(record)["task"], []).append(record)
print(f"{'kind':<12} {'inputs -> output':<36} {'records':>7} {'fastest us':>10} {'slowest us':>10}")
for group in sorted(by_task.values(), key=lambda g: min(float(r.run_secs[0]) for r in g)):
    secs = [float(r.run_secs[0]) for r in group]
    shapes = ["x".join(map(str, a.shape)) or "scalar" for a in group[0].args_info]
    shapes = " ".join(shapes[:-1]) + " -> " + shapes[-1]
    print(f"{icca_plan(group[0])['kind']:<12} {shapes[:36]:<36} {len(group):>7} "
          f"{min(secs) * 1e6:>10.3f} {max(secs) * 1e6:>10.3f}")

# %%
# The three fastest records of the task whose plans differ most. ``op_partition`` is F_op
# per axis (their product is the number of cores used); ``temporal`` has one dict per tensor
# (inputs, then output) giving the factors by which it is cut into rotating pieces (empty:
# not cut); ``database.get_top_k`` is meta_schedule's own "best k records of a workload".
widest = max(by_task.values(), key=lambda g: max(float(r.run_secs[0]) for r in g)
             / min(float(r.run_secs[0]) for r in g))
for record in database.get_top_k(widest[0].workload, 3):
    plan = icca_plan(record)["plan"]
    print(f"{float(record.run_secs[0]) * 1e6:8.3f} us  op_partition {plan['op_partition']}  "
          f"temporal {plan['temporal']}")

# %%
# Compile with the records
# ------------------------
# Inside ``with tvm_icca.use_database(work_dir)``, every compilation asks the records about
# each operator it plans. A record replaces the compiler's plan only if it was measured on
# this exact chip, still fits the operator's SRAM budget here, and beats the compiler's own
# plan as measured in the same records, so a tuned operator is never slower than its
# untuned plan. ``report()`` says what happened.
#
# With the default settings, nothing is applied:
with tvm_icca.use_hardware(hw), tvm_icca.use_database(work_dir) as tuned:
    tvm.compile(mod, target="icca")
print(tuned.report())
assert not tuned.applied and "kept on chip" in tuned.report()

# %%
# This model fits in the chip's SRAM, so by default the compiler keeps its weights on chip,
# loaded once before the first call (T10's setting). Where each weight rests between calls
# and where each operator needs it are then one joint decision over all operators (T10
# §4.3.2, Algorithm 1), so plans are not chosen one operator at a time and per-operator
# records have nothing to replace. Records apply when the weights come from off chip at every
# call: from HBM on a chip that has it, or from the host, which is what a chip without HBM
# does with a model too large for its SRAM. ``state="host"`` asks for that here:
x = np.random.default_rng(0).standard_normal((32, 64)).astype("float32")
(expected,) = ReferenceEvaluator(onnx.load(model_path)).run(None, {"x": x})


def run(executable) -> tuple[np.ndarray, dict, object]:
    """Run the model once; its output, run statistics and timing report."""
    vm = relax.VirtualMachine(executable, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x)).numpy()
    return out, tvm_icca.last_run_stats(), last_run_timing()


untuned_out, untuned, untuned_timing = run(tvm_icca.compile(mod, hw, state="host"))
with tvm_icca.use_database(work_dir) as tuned:
    tuned_out, tuned_stats, tuned_timing = run(tvm_icca.compile(mod, hw, state="host"))
print(tuned.report())

# %%
# The run statistics name the operators that ran a tuned plan (``tuned_ops``, in the
# :doc:`../glossary`); they are the ones the report lists. Both compilations compute the
# same function, so both match the ONNX reference.
print("tuned operators in the run:", [name.rsplit(".", 1)[-1] for name in tuned_stats["tuned_ops"]])
assert set(tuned_stats["tuned_ops"]) == {a.op for a in tuned.applied}
assert all(a.tuned_s < a.untuned_s for a in tuned.applied)
assert not untuned["tuned_ops"]
for out in (untuned_out, tuned_out):
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)

# %%
# The plans themselves
# --------------------
# :func:`tvm_icca.plan_device_programs` is the planning pass ``tvm.compile`` runs;
# :func:`tvm_icca.device_programs` lists what it planned. Run with and without the records,
# they show each tuned operator's plan next to the compiler's own. ``OpProgram.tuned``
# marks where a plan came from records.
options = tvm_icca.CompileOptions(state="host")
partitioned = tvm_icca.partition_for_icca(mod, hw=hw)
plain = tvm_icca.device_programs(tvm_icca.plan_device_programs(hw, options)(partitioned))
with tvm_icca.use_database(work_dir):
    tuned_programs = tvm_icca.device_programs(
        tvm_icca.plan_device_programs(hw, options)(partitioned))
compiler_plans = {op.name: op.plan for program in plain for op in program.ops}
for program in tuned_programs:
    for op in program.ops:
        if op.tuned:
            before = compiler_plans[op.name]
            print(op.display_label(), op.name.rsplit(".", 1)[-1])
            print("   compiler:", dict(before.op_partition), [dict(t) for t in before.temporal])
            print("   tuned:   ", dict(op.plan.op_partition), [dict(t) for t in op.plan.temporal])
tuned_names = {op.name for program in tuned_programs for op in program.ops if op.tuned}
assert tuned_names == set(tuned_stats["tuned_ops"])
assert all(op.plan.op_partition != compiler_plans[op.name].op_partition
           or op.plan.temporal != compiler_plans[op.name].temporal
           for program in tuned_programs for op in program.ops if op.tuned)

# %%
# What the two plans trade off is visible in the factors. A factor on a reduction axis
# (``k``) splits the sum over cores, whose partial results are then added up across cores
# (a replica reduction, counted in ``reduction_bytes``); a larger factor on an output axis
# (``i0``, ``i1``) gives each core a smaller block of the result but more copies of the
# operand that axis does not index. The analytic model weighs such costs approximately; the
# measurement settles them for this chip.

# %%
# Did it pay off?
# ---------------
# The simulated time of one call, untuned and tuned with the weights sent from the host,
# and with the default (weights kept on chip), next to where the time goes: ``host_s`` is
# the time the host link is busy; compute and transfer (within the operators) are what the
# plans decide.
_, default_stats, default_timing = run(tvm_icca.compile(mod, hw))
print(f"{'':<26} {'simulated us':>12} {'host link us':>12} {'compute+transfer us':>20}")
for name, stats, timing in (("host weights, untuned", untuned, untuned_timing),
                            ("host weights, tuned", tuned_stats, tuned_timing),
                            ("kept on chip (default)", default_stats, default_timing)):
    print(f"{name:<26} {stats['simulated_s'] * 1e6:>12.3f} {timing.host_s * 1e6:>12.3f} "
          f"{(timing.compute_s + timing.transfer_s) * 1e6:>20.3f}")
change = untuned["simulated_s"] / tuned_stats["simulated_s"]
print(f"tuning: {change:.3f}x on the whole call; the tuned operators alone: "
      f"{sum(a.untuned_s for a in tuned.applied) * 1e6:.3f} us -> "
      f"{sum(a.tuned_s for a in tuned.applied) * 1e6:.3f} us")
if tuned.applied:
    # the tuned operators are part of the call: the call gains less than its best operator
    assert 1.0 < change < max(a.gain for a in tuned.applied)
else:
    # no record beat the compiler's plan, so the two compilations are the same program
    assert change == 1.0
assert untuned_timing.host_s > untuned_timing.compute_s + untuned_timing.transfer_s
assert default_stats["simulated_s"] < tuned_stats["simulated_s"]

# %%
# Read the numbers as they are. Tuning found faster plans for some operators, but the whole
# call gains much less than those operators do: with the weights streamed from the host, the
# host link is busy for longer than the operators compute and shift, so much of the call is
# spent waiting for data that no plan changes. Keeping the model on chip, when it fits,
# removes that wait and is worth more here than tuning. Tuning pays where operator time
# dominates: large operators, and models whose weights preload from HBM while earlier
# operators run (there the Elk preload pass also reads the measured times from the records).
