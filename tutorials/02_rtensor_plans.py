"""
rTensor execution plans of one operator
=======================================

This tutorial teaches how tvm_icca decides where one operator's data lives and how it moves:
T10's compute-shift execution plans (T10 §4.1-§4.3). It plans a transformer projection that
is too large to keep whole on every core that needs it, reads the plan the compiler chose
(the operator partition F_op, each tensor's spatial and temporal partition factors f_s and
f_t, the rotating pace rp, the compute-shift steps), counts the operator's plan space, draws
its time/memory Pareto frontier with the chosen plan and the SRAM budget on it, shows how a
smaller budget changes the plan, and finally runs the operator on the simulated device and
checks it against numpy.
"""

# %%
# Sizes
# -----
# The full size (the default, and what the documentation shows) is the output projection of
# a transformer with ``d_model = 2560`` (the width of Phi-2 or GPT-Neo 2.7B) over one
# 2,048-token sequence, in float32, on the IPU Mk2 preset: 1,472 cores with 624 KiB of SRAM
# each. The small configuration (``TVM_ICCA_TUTORIAL_SIZE=small``, used by the test suite)
# plans a 256-token, ``d_model = 512`` projection on a 64-core chip with 64 KiB per core;
# every step is the same.
import itertools
import os

import matplotlib.pyplot as plt
import numpy as np
import tvm
from tvm import relax

import tvm_icca
from runtime_sim.contract.layout import OpLayout
from tvm_icca.plan_search import (
    PlanFilters,
    count_complete_space,
    pareto_plans,
    plan_operator,
    rotating_tensors,
)

SIZE = os.environ.get("TVM_ICCA_TUTORIAL_SIZE", "full")
if SIZE == "small":
    TOKENS, D_MODEL = 256, 512
    hw = tvm_icca.small_chip(64, 64 * 1024)
else:
    TOKENS, D_MODEL = 2048, 2560
    hw = tvm_icca.preset("ipu-mk2")
print(f"{hw.name}: {hw.num_cores} cores, {hw.sram_bytes_per_core} bytes of SRAM per core, "
      f"{hw.usable_sram_bytes} of them usable by tensors (the rest is the shift buffer)")

# %%
# Build the operator
# ------------------
# A Relax module with one matmul, ``y = x @ w``: ``x`` holds the activations (tokens x
# d_model), ``w`` the projection's weights. Relax's ``BlockBuilder`` writes it directly; a
# model imported from ONNX or PyTorch gives the same operator.
#
# The tensors themselves take a small part of the chip's SRAM. What does not fit is the
# copies: a core computing a block of ``y`` needs the rows of ``x`` and the columns of ``w``
# of that block, and each of those is needed by many cores.
bb = relax.BlockBuilder()
x = relax.Var("x", relax.TensorType((TOKENS, D_MODEL), "float32"))
w = relax.Var("w", relax.TensorType((D_MODEL, D_MODEL), "float32"))
with bb.function("main", [x, w]):
    with bb.dataflow():
        y = bb.emit_output(relax.op.matmul(x, w))
    bb.emit_func_output(y)
mod = bb.get()

tensor_mib = 4 * (2 * TOKENS * D_MODEL + D_MODEL * D_MODEL) / 2**20
chip_mib = hw.num_cores * hw.usable_sram_bytes / 2**20
print(f"x, w and y hold {tensor_mib:.0f} MiB; the chip's usable SRAM is {chip_mib:.0f} MiB")

# %%
# Partition and plan
# ------------------
# ``partition_for_icca`` puts the matmul in an ICCA region; ``plan_device_programs`` turns
# every region into a device program, choosing each operator's plan (``tvm.compile`` runs the
# same pass). ``state="host"`` says the model's parameters come from the host on every run,
# so the region is planned on its own with the whole SRAM of each core. (When the model is
# kept on chip, the default on a chip without HBM, the compiler first reserves SRAM for the
# activations and picks the plans of all operators together, T10 §4.3.2; that is another
# tutorial.)
#
# ``device_programs`` lists the programs in the order ``main`` runs them. Each operator
# carries its tensor expression ``expr`` (TVM's own TE compute, in T10's notation: axes
# ``i0`` over tokens, ``i1`` over output features, ``k`` the reduction) and its ``plan``.
partitioned = tvm_icca.partition_for_icca(mod, hw=hw)
options = tvm_icca.CompileOptions(state="host")
planned = tvm_icca.plan_device_programs(hw, options)(partitioned)
(program,) = tvm_icca.device_programs(planned)
(op,) = program.ops
print(op.expr)

# %%
# The same search runs on the operator alone: ``plan_operator`` returns the fastest plan
# whose tensors fit the per-core budget (by default ``hw.usable_sram_bytes``), by the
# analytic cost model. It is the plan the compiler chose.
chosen = plan_operator(op.expr, hw)
assert chosen.plan == op.plan
layout = OpLayout(op.expr, op.plan)
print(op.plan)

# %%
# Read the plan
# -------------
# An :class:`~runtime_sim.contract.plan.ExecutionPlan` has these fields:
#
# * ``op_partition`` is F_op: how many pieces each axis is cut into. Their product is the
#   number of sub-operators, one per core (T10 §4.2 "Partitioning an operator").
# * ``temporal`` gives, per tensor (inputs, then the output), its temporal factor f_t on each
#   axis (missing means 1). A tensor not indexed by an axis that F_op splits is needed by
#   several cores: with f_t = 1 each of them holds a full copy of its sub-tensor; with f_t > 1
#   the sub-tensor is cut into f_t partitions that the cores pass around a ring, each core
#   receiving the next partition as the loop on that axis advances.
# * ``loop_order`` lists the axes that take steps, outermost first; ``core_order`` and
#   ``chips`` place the sub-operators on physical cores (empty and 1: in axis order on one
#   chip).
#
# :class:`~runtime_sim.contract.layout.OpLayout` is what the plan means on the cores: per
# axis, the steps ``S`` and the rotating pace ``rp``, the length of the sub-task a core
# computes in one step (T10 §4.2 "Aligning the rotations").
print(f"{'axis':>5} {'extent':>7} {'F_op':>5} {'steps S':>8} {'rp':>5}")
for axis in op.expr.axes:
    a = axis.name
    print(f"{a:>5} {axis.extent:>7} {layout.F[a]:>5} {layout.S[a]:>8} {layout.rp[a]:>5}")
print(f"{layout.num_cores} cores, {layout.steps} compute-shift steps, "
      f"{layout.memory_bytes_per_core()} bytes of tensors per core")

# %%
# ``rotating_tensors`` gives T10's per-tensor view, the rTensor (§4.1): for each dimension
# of each tensor, f_s (sub-tensors), f_t (partitions of a sub-tensor that rotate) and rp
# (elements shifted per step). ``sharing`` is how many cores need each sub-tensor;
# ``rings`` how many copies of it exist (``sharing / prod(f_t)``): f_t trades copies, and so
# memory, for shifts.
print(f"{'tensor':>8} {'shape':>14} {'f_s':>10} {'f_t':>8} {'rp':>8} {'sharing':>8} {'rings':>6} "
      f"{'partition':>12} {'bytes':>7}")
rtensors = rotating_tensors(layout)
names = [rt.name for rt in rtensors[:-1]] + ["y"]  # the output's own name is generated
for t, (name, rt) in enumerate(zip(names, rtensors)):
    print(f"{name:>8} {rt.shape!s:>14} {rt.spatial_partition_factor!s:>10} "
          f"{rt.temporal_partition_factor!s:>8} {rt.rotating_pace!s:>8} "
          f"{layout.sharing(t):>8} {layout.replicas(t):>6} "
          f"{layout.partition_shape(t)!s:>12} {layout.partition_bytes(t):>7}")

rotating = [n for n, rt in zip(names, rtensors) if max(rt.temporal_partition_factor) > 1]
print("rotating tensors:", rotating)
# The point of this tutorial: on this chip the chosen plan really rotates data.
assert rotating and layout.steps > 1
assert layout.memory_bytes_per_core() <= hw.usable_sram_bytes

# %%
# The cost model's estimate of the plan, by component: the sub-tasks on the compute arrays,
# one synchronization per step, the shifts, and the sum of output replicas when ``k`` is
# split across cores (the partial sums of a split reduction).
cost = chosen.cost
print(f"estimated {cost.time_s * 1e6:.1f} us = compute {cost.compute_s * 1e6:.1f} + sync "
      f"{cost.sync_s * 1e6:.1f} + shifts {cost.shift_s * 1e6:.1f} + reduction "
      f"{cost.reduction_s * 1e6:.1f} (+ epilogue {cost.epilogue_s * 1e6:.1f}) us")

# %%
# The plan space
# --------------
# Every F_op whose product is at most the number of cores, every valid choice of temporal
# factors for each tensor and every order of the stepping loops is a plan. T10 Fig. 17 calls
# this the complete space; ``count_complete_space`` counts it without listing it.
space = count_complete_space(op.expr, hw.num_cores)
print(f"{space.op_partitions:,} operator partitions F_op, {space.complete_plans:,} (F_op, f_t) "
      f"plans, {space.complete:,} with their loop orders")
assert space.complete >= space.complete_plans >= space.op_partitions > 1

# %%
# The Pareto frontier
# -------------------
# Most of those plans are worse than another one in both time and memory. T10 keeps, per
# operator, the plans on the time/memory Pareto frontier (§4.3.1): no other plan is at least
# as fast with at most as many bytes per core. ``pareto_plans`` searches T10's filtered space
# by default (``PlanFilters.t10()``, the §4.3.1 search constraints); here it searches the
# complete space (``PlanFilters.none()``), the one ``plan_operator`` searches, and with twice
# the SRAM as budget, to also show the plans that do not fit.
budget = hw.usable_sram_bytes
front = pareto_plans(op.expr, hw, filters=PlanFilters.none(), budget_bytes=2 * budget)
fits = [p for p in front if p.memory_bytes <= budget]
print(f"{len(front)} frontier plans up to {2 * budget} bytes per core, {len(fits)} within "
      f"the budget of {budget}")
print(f"{'bytes/core':>11} {'time us':>8} {'cores':>6} {'steps':>6}  F_op")
for p in front:
    mark = "  <- chosen" if p.plan == chosen.plan else ""
    print(f"{p.memory_bytes:>11} {p.time_s * 1e6:>8.2f} {p.cores:>6} "
          f"{OpLayout(op.expr, p.plan).steps:>6}  {dict(p.plan.op_partition)}{mark}")

# %%
# What ``plan_operator`` optimizes is time under a memory budget, so its plan is the fastest
# frontier plan within the budget, and no frontier plan is both as fast and smaller. The
# frontier plans right of the budget are faster, but their tensors do not fit.
fastest_fit = min(fits, key=lambda p: p.time_s)
assert np.isclose(fastest_fit.time_s, chosen.time_s, rtol=1e-9)
assert fastest_fit.memory_bytes == chosen.memory_bytes_per_core
assert not any(p.time_s <= chosen.time_s and p.memory_bytes < chosen.memory_bytes_per_core
               for p in front)
beyond = [p for p in front if p.memory_bytes > budget]
assert beyond and all(p.time_s < chosen.time_s for p in beyond)
print(f"the fastest plan within twice the budget needs {beyond[-1].memory_bytes} bytes per "
      f"core and is {chosen.time_s / beyond[-1].time_s:.2f}x faster than the chosen one")

# %%
# A smaller budget
# ----------------
# An operator rarely gets a core's whole SRAM: other tensors of the model live there too
# (T10 §4.3.2 hands out memory between operators). ``budget_bytes`` asks for the best plan
# within less. Tighter budgets leave room for smaller partitions only: tensors are cut into
# more rotating partitions or other tensors rotate, more bytes cross the links and the
# operator gets slower (the steps usually grow too, but the search minimizes time, not
# steps). Below the smallest footprint of any plan,
# ``plan_operator`` raises :class:`tvm_icca.PlanNotFoundError`.
print(f"{'budget':>8} {'bytes/core':>11} {'time us':>8} {'steps':>6} {'bytes shifted':>14}  "
      "rotating (f_t > 1)")
by_budget = {}
for fraction in (1, 3 / 4, 1 / 2, 1 / 4):
    limit = int(budget * fraction)
    try:
        p = plan_operator(op.expr, hw, budget_bytes=limit)
    except tvm_icca.PlanNotFoundError as err:
        print(f"{limit:>8}  PlanNotFoundError: {err}")
        continue
    by_budget[limit] = p
    spinning = [n for n, rt in zip(names, rotating_tensors(p.layout))
                if max(rt.temporal_partition_factor) > 1]
    print(f"{limit:>8} {p.memory_bytes_per_core:>11} {p.time_s * 1e6:>8.2f} {p.layout.steps:>6} "
          f"{p.layout.shift_bytes():>14}  {spinning}")

limits = sorted(by_budget, reverse=True)  # largest budget first
times = [by_budget[b].time_s for b in limits]
shifted = [by_budget[b].layout.shift_bytes() for b in limits]
assert len(limits) >= 2 and by_budget[limits[0]].plan == chosen.plan
assert all(a < b for a, b in itertools.pairwise(times))  # slower as the budget shrinks
assert all(a < b for a, b in itertools.pairwise(shifted))  # more bytes rotate
assert by_budget[limits[1]].layout.steps > chosen.layout.steps

# %%
# The frontier, the budget and the chosen plans in one picture. The grey staircase is the
# best time any plan reaches within a given number of bytes per core; filled points are plans
# that rotate (more than one step), hollow ones keep every tensor whole on its cores. The
# compiler's plan is the lowest point left of the SRAM line; each tighter budget (dotted)
# moves the choice left and up along the frontier.
memory_kib = np.array([p.memory_bytes for p in front]) / 1024
time_us = np.array([p.time_s for p in front]) * 1e6
rotates = np.array([OpLayout(op.expr, p.plan).steps > 1 for p in front])
fig, ax = plt.subplots(figsize=(7.5, 4.8))
ax.step(memory_kib, time_us, where="post", color="0.75", zorder=1)
ax.scatter(memory_kib[rotates], time_us[rotates], s=22, color="tab:blue", zorder=2,
           label="Pareto plan, rotating")
ax.scatter(memory_kib[~rotates], time_us[~rotates], s=22, facecolors="white",
           edgecolors="tab:blue", zorder=2, label="Pareto plan, no rotation")
ax.axvline(budget / 1024, color="tab:red", linestyle="--",
           label=f"usable SRAM per core ({budget / 1024:.0f} KiB)")
for limit in limits[1:]:
    p = by_budget[limit]
    ax.axvline(limit / 1024, color="tab:orange", linestyle=":", linewidth=1)
    ax.scatter(p.memory_bytes_per_core / 1024, p.time_s * 1e6, marker="D", s=45,
               color="tab:orange", zorder=3)
    ax.annotate(f"best within {limit / 1024:.0f} KiB", (p.memory_bytes_per_core / 1024,
                p.time_s * 1e6), textcoords="offset points", xytext=(6, 5), fontsize=8)
ax.scatter(chosen.memory_bytes_per_core / 1024, chosen.time_s * 1e6, marker="*", s=240,
           color="tab:green", zorder=4, label=f"chosen plan ({chosen.layout.steps} steps)")
ax.set_xlabel("tensor bytes per core (KiB)")
ax.set_ylabel("estimated time (us)")
ax.set_title(f"matmul [{TOKENS}, {D_MODEL}] x [{D_MODEL}, {D_MODEL}] on {hw.name}: "
             "time/memory Pareto frontier")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %%
# Compile and run
# ---------------
# ``tvm_icca.compile`` runs the same partitioning and planning passes, then builds the host
# program; the Relax VM calls the simulated device for the region. The device runs the plan
# step by step on the data (each core computes its sub-task, then the rotating partitions
# shift), so the result is checked against numpy.
executable = tvm_icca.compile(mod, hw, state="host")
vm = relax.VirtualMachine(executable, tvm.cpu())
rng = np.random.default_rng(0)
x_np = rng.standard_normal((TOKENS, D_MODEL)).astype("float32")
w_np = (rng.standard_normal((D_MODEL, D_MODEL)) / np.sqrt(D_MODEL)).astype("float32")
y_np = vm["main"](tvm.runtime.tensor(x_np), tvm.runtime.tensor(w_np)).numpy()
np.testing.assert_allclose(y_np, x_np.astype(np.float64) @ w_np, rtol=1e-4, atol=1e-4)
print("the device's result matches numpy")

# %%
# ``last_run_stats`` reports the run (every key is defined in the :doc:`/glossary`).
# ``steps`` counts compute-shift steps, ``rotation_bytes`` the bytes rotations moved between
# cores, ``reduction_bytes`` those that summed output replicas, ``shift_bytes`` both.
# They are exactly what the plan says: the layout computes the same numbers in closed form.
# (When the output rotates in a single ring over all the cores that share it, ``rings`` 1 in
# the table above, its partial sums accumulate as they travel and no reduction is left.)
stats = tvm_icca.last_run_stats()
for key in ("cores_used", "steps", "shift_bytes", "rotation_bytes", "reduction_bytes",
            "peak_sram_bytes_per_core", "simulated_s"):
    print(f"{key:>25}: {stats[key]}")
assert stats["steps"] == layout.steps
assert stats["cores_used"] == layout.num_cores
assert stats["rotation_bytes"] == layout.shift_bytes() > 0
assert stats["reduction_bytes"] == layout.reduction_bytes()
assert stats["shift_bytes"] == stats["rotation_bytes"] + stats["reduction_bytes"]
assert stats["peak_sram_bytes_per_core"] <= hw.sram_bytes_per_core
