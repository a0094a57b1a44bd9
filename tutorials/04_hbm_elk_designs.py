"""
HBM and Elk's preload designs
=============================

This tutorial teaches how tvm_icca compiles for a chip with HBM, where a model's weights and
KV caches do not fit in the cores' SRAM and must be preloaded from HBM while other operators
run. It compares the five preload designs of Elk §6.1 (``basic``, ``static``, ``elk-dyn``,
``elk-full`` and the ``ideal`` roofline) on one decode step of Llama2-13B: the per-token
time, the breakdown Elk reports (preload only, execute only, overlapped, interconnect
stall), the utilizations and the HBM floor, and what the gap to ``ideal`` means. It ends
with a sweep a chip architect would run: per-token time against HBM bandwidth for two
designs.
"""

# %%
# Sizes
# -----
# The full size (the default, and what the documentation shows) compares the designs on
# the setting of Elk §6.1: a Llama2-13B decode step at batch 32 with 2,048-token KV caches,
# in float16, on ``ipu-pod4-hbm`` (four IPU Mk2 chips, 5,888 cores, 16 TB/s of HBM). It
# keeps the first two of the 40 layers: the layers are identical, so two of them show how
# the designs schedule every layer, and the compile takes seconds instead of minutes. The
# HBM sweep compiles the model once per chip, so it runs a smaller serving point: batch 8
# with 512-token contexts.
#
# The small configuration (``TVM_ICCA_TUTORIAL_SIZE=small``, used by the test suite) runs
# the same architecture at toy width (``tiny=True``: hidden size 64) for both parts, on one
# of the four chips (1,472 cores and a quarter of the HBM: 4 controllers, 4 TB/s), and
# sweeps three bandwidths instead of four; every step is the same.
import itertools
import os

import matplotlib.pyplot as plt
import numpy as np

import tvm_icca

SIZE = os.environ.get("TVM_ICCA_TUTORIAL_SIZE", "full")
if SIZE == "small":
    workload = tvm_icca.get_workload("llama2-13b", batch=32, context=2048, num_layers=2,
                                     tiny=True)
    sweep_workload = workload
    SWEEP_TBPS = (1, 4, 16)
    CHIPS = {"name": "ipu-mk2-hbm", "num_chips": 1, "num_cores": 1472, "hbm_controllers": 4,
             "hbm_bandwidth": 4e12}
else:
    workload = tvm_icca.get_workload("llama2-13b", batch=32, context=2048, num_layers=2)
    sweep_workload = tvm_icca.get_workload("llama2-13b", batch=8, context=512, num_layers=2)
    SWEEP_TBPS = (8, 16, 32, 64)
    CHIPS = {}
hw = tvm_icca.preset("ipu-pod4-hbm", **CHIPS)
print(workload.description)
print(f"{hw.name}: {hw.num_chips} chip{'s' * (hw.num_chips > 1)}, {hw.num_cores} cores with "
      f"{hw.sram_bytes_per_core // 1024} KiB of SRAM each, {hw.hbm_bandwidth / 1e12:g} TB/s "
      f"of HBM")

# %%
# Why a chip with HBM needs a preload schedule
# --------------------------------------------
# An inter-core connected chip computes out of its cores' SRAM, and the SRAM of four IPU
# Mk2 chips is a fraction of Llama2-13B's weights (the numbers are below). So the weights
# and KV caches live in HBM, and every operator's share of them has to be brought into SRAM
# before it runs. To keep the cores busy, the loads of later operators run *while* the
# current one executes (a *preload*), which means each core's SRAM is split between the
# executing operator (its *execution space*) and the preloaded data of the operators to
# come (the *preload space*). Elk (MICRO'25) shows that this split is a trade-off (§3): more
# execution space lets an operator use a faster plan; more preload space lets more
# operators be preloaded ahead, keeping HBM busy, and lets the HBM controllers broadcast
# shared data instead of the cores exchanging it later; and the preloads compete with the
# executions for the interconnect.
#
# The sizes make the point. ``get_workload`` builds shapes only, so the whole 40-layer model
# costs nothing to count:
whole = tvm_icca.get_workload("llama2-13b", batch=32, context=2048)
sram_bytes = hw.num_cores * hw.sram_bytes_per_core
print(f"llama2-13b, {whole.config['layers']} layers: {whole.nbytes('weight') / 1e9:.1f} GB of "
      f"weights, {whole.nbytes('kv_cache') / 1e9:.1f} GB of KV caches at batch 32, context "
      f"2048; SRAM of {hw.name}: {sram_bytes / 1e9:.2f} GB")
assert whole.nbytes("weight") > sram_bytes

# %%
# The five designs
# ----------------
# ``tvm_icca.PRELOAD_DESIGNS`` names them; ``help(tvm_icca.CompileOptions)`` describes each:
#
# * ``basic``: what a compiler that optimizes on-chip execution alone does. Every operator
#   runs its fastest plan; only the next operator is preloaded, in the SRAM left over;
# * ``static``: one split of SRAM between execution and preloads for the whole model (the
#   best of a sweep of splits), several operators preloaded ahead (T10 extended to HBM, as
#   Elk §6.1 builds it);
# * ``elk-dyn``: Elk's inductive scheduling (§4.2) decides how many operators to preload
#   during each execution, and its cost-aware allocation (§4.3) sizes every operator's
#   execution and preload space, in execution order;
# * ``elk-full``: ``elk-dyn`` plus preload order permutation (§4.4): loading some operators
#   out of order to match light preloads with heavy executions. It is the default on a chip
#   with HBM;
# * ``ideal``: not a real schedule but a roofline: preloads get their own interconnect and a
#   second, full-sized SRAM, and the distribution of preloaded data costs nothing.
#
# Each design compiles the same model into different device programs: the operators' plans,
# the preload instructions and their order. ``compile_programs(..., preload=design)``
# runs the compiler with that design and ``simulate()`` times the result. A shared
# ``PlanCache`` makes every design after the first reuse the operator plans the designs have
# in common.
cache = tvm_icca.PlanCache()
reports, summaries = {}, {}
for design in tvm_icca.PRELOAD_DESIGNS:
    compiled = tvm_icca.compile_programs(workload, hw, preload=design, plan_cache=cache,
                                         progress=False)
    reports[design] = compiled.simulate()
    summaries[design] = compiled.preload
    print(f"{design:<9} compiled in {compiled.compile_s:5.1f} s: "
          f"{compiled.preload.preloads} preloads of {compiled.preload.num_ops} operators")

# %%
# Side by side
# ------------
# Per design: ``ms/step``, the time of one decode step (each sequence of the batch gets
# one new token: Elk's per-token latency, not the design-space tables' time per generated
# token, which divides it by the batch); ``of ideal``, ideal's time over the
# design's (100% is the roofline); ``vs basic``, the speed-up over ``basic``. Then Elk's
# breakdown of the time (Elk Fig. 18), in the timing report's names (:doc:`/glossary`):
#
# * ``preload`` (``preload_only_s``): loads run while no operator executes, so the cores
#   wait for data;
# * ``execute`` (``execute_only_s``): an operator executes while nothing loads, so HBM idles;
# * ``overlap`` (``preload_overlap_s``): both at once, the time a good schedule maximizes;
# * ``ic stall`` (``interconnect_stall_s``): time the cores wait because preloads and
#   executions share links; the cores are waiting for a load then, so it is part of the
#   preload-only time, not added to it.
#
# Then the utilizations (``hbm_utilization``, ``interconnect_utilization``: the share of the
# time links are busy, ``flops_utilization``), and ``estimate``, the compiler's own
# prediction of the time (``compiled.preload.estimated_s``), the number each design's search
# minimizes.
#
# The last line is the HBM floor (``hbm_floor_s``): the distinct bytes the step reads from
# HBM over the HBM bandwidth. No schedule beats it: every weight and cache byte must cross
# from HBM once.
def ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.4f}"


ideal_s = reports["ideal"].total_s
basic_s = reports["basic"].total_s
print(f"{'design':<9} {'ms/step':>8} {'of ideal':>8} {'vs basic':>8} {'preload':>8} "
      f"{'execute':>8} {'overlap':>8} {'ic stall':>8} {'HBM':>6} {'links':>6} {'FLOPS':>6} "
      f"{'estimate':>8}")
for design, r in reports.items():
    print(f"{design:<9} {ms(r.total_s)} {ideal_s / r.total_s:8.1%} {basic_s / r.total_s:7.2f}x "
          f"{ms(r.preload_only_s)} {ms(r.execute_only_s)} {ms(r.preload_overlap_s)} "
          f"{ms(r.interconnect_stall_s)} {r.hbm_utilization:6.1%} "
          f"{r.interconnect_utilization:6.1%} {r.flops_utilization:6.1%} "
          f"{ms(summaries[design].estimated_s)}")
hbm_floor_s = reports["elk-full"].hbm_floor_s
print(f"{'HBM floor':<9} {ms(hbm_floor_s)}  "
      f"({reports['elk-full'].hbm_bytes / 1e9:.2f} GB at {hw.hbm_bandwidth / 1e12:g} TB/s)")

# %%
# What the table guarantees. Each design's candidate schedules include the schedule of the
# design before it (Static's sweep includes Basic's split, Elk-Dyn's candidates include
# Static's schedule, Elk-Full's include Elk-Dyn's order), and Ideal relaxes every limit the
# others face, so on the compiler's estimate the designs are ordered by construction. The
# simulated times keep that order here. All of them read the same bytes from HBM, and none
# is below the HBM floor. The three parts of the breakdown never exceed the total: what is
# left is time when neither a load nor an execution runs, such as the logits returning to
# the host at the end of the step.
ORDER = ("ideal", "elk-full", "elk-dyn", "static", "basic")
for faster, slower in itertools.pairwise(ORDER):
    assert summaries[faster].estimated_s <= summaries[slower].estimated_s * (1 + 1e-9)
    assert reports[faster].total_s <= reports[slower].total_s * (1 + 1e-9), (faster, slower)
for design, r in reports.items():
    assert r.interconnect_stall_s <= r.preload_only_s
    assert r.hbm_bytes == reports["basic"].hbm_bytes
    assert r.total_s >= r.hbm_floor_s
    assert r.preload_only_s + r.execute_only_s + r.preload_overlap_s <= r.total_s * (1 + 1e-9)
assert reports["elk-full"].preload_overlap_s > reports["basic"].preload_overlap_s
assert reports["elk-full"].preload_only_s < reports["basic"].preload_only_s

# %%
# The picture: each design's time split as Elk splits it, with the HBM floor as a line.
# Basic leaves long stretches where only one side works; Elk's designs turn much of them
# into overlap.
parts = (("preload only", "preload_only_s", "tab:red"),
         ("overlapped", "preload_overlap_s", "tab:purple"),
         ("execute only", "execute_only_s", "tab:blue"))
fig, ax = plt.subplots(figsize=(7.5, 4))
x = np.arange(len(reports))
bottom = np.zeros(len(reports))
for label, key, colour in parts:
    heights = np.array([getattr(r, key) * 1e3 for r in reports.values()])
    ax.bar(x, heights, bottom=bottom, color=colour, label=label, width=0.6)
    bottom += heights
rest = np.array([r.total_s * 1e3 for r in reports.values()]) - bottom
ax.bar(x, rest, bottom=bottom, color="0.8", label="neither", width=0.6)
ax.axhline(hbm_floor_s * 1e3, color="k", linestyle="--", linewidth=1, label="HBM floor")
ax.set_xticks(x, list(reports))
ax.set_ylabel("ms per decode step")
ax.set_title(f"{workload.name}, batch {workload.config['batch']}, context "
             f"{workload.config['context']} ({workload.config['layers']} layers) on {hw.name}")
ax.legend(fontsize=8, loc="upper right")
fig.tight_layout()
plt.show()

# %%
# The gap to ``ideal``
# --------------------
# ``ideal`` is what these operators would take if preloading had its own SRAM and its own
# links, so that loads and executions never compete for space or bandwidth. The gap between
# ``elk-full`` and ``ideal`` is therefore the price of sharing one SRAM and one interconnect
# between preloading and executing on a real chip; a better schedule (plans, preload spaces,
# preload order) is the only way to shrink it. ``ideal`` itself stays above the HBM floor
# for reasons no sharing explains: an operator cannot start before its data has arrived,
# the first loads of the step have no earlier execution to hide under, and some of the step
# does not touch HBM at all (the logits returning to the host).
#
# Two more things the table shows. ``elk-full`` can only match or beat ``elk-dyn``: its
# candidate orders include the execution order; where no other order is better, the two are
# the same schedule. And ``ideal``'s interconnect utilization is over its two interconnects
# (the glossary's ``interconnect_utilization``), so it does not compare with the others'.
full_s = reports["elk-full"].total_s
print(f"elk-full is {full_s / ideal_s - 1:.1%} slower than ideal, {basic_s / full_s:.2f}x "
      f"faster than basic and {reports['static'].total_s / full_s:.2f}x faster than static")
print(f"ideal is {ideal_s / hbm_floor_s:.2f}x the HBM floor")

# %%
# An architect's sweep: how much HBM bandwidth is worth buying
# ------------------------------------------------------------
# ``tvm_icca.preset(name, **overrides)`` makes a variant of a preset chip: here the same
# chips with a different HBM bandwidth (spread over the same controllers). Each
# variant is a new chip to the compiler, so the model is compiled for each, under
# ``basic`` and ``elk-full``.
#
# Besides the times, the sweep prints the step's floors (the timing report's
# ``hbm_floor_s``, ``interconnect_floor_s`` and ``compute_floor_s``). The HBM floor halves
# with every doubling of the bandwidth; the others do not move. While HBM's is the largest,
# the step is bound by HBM and more bandwidth pays; once it has dropped below the
# interconnect floor (the links must still deliver every loaded byte to its cores, besides
# the executions' own exchanges), the interconnect bounds the step and more HBM bandwidth
# buys little. Elk §6.4 reaches the same conclusion: HBM and interconnect bandwidth have to
# grow together.
print(sweep_workload.description)
print(f"{'HBM TB/s':>8} {'basic ms':>9} {'elk-full':>9} {'speed-up':>8} {'HBM floor':>9} "
      f"{'ic floor':>9} {'FLOP floor':>10}")
sweep = {"basic": [], "elk-full": []}
floors = []
for tbps in SWEEP_TBPS:
    chip = tvm_icca.preset("ipu-pod4-hbm", **{**CHIPS, "hbm_bandwidth": tbps * 1e12})
    for design, times in sweep.items():
        compiled = tvm_icca.compile_programs(sweep_workload, chip, preload=design,
                                             plan_cache=cache, progress=False)
        report = compiled.simulate()
        times.append(report.total_s)
    floors.append((report.hbm_floor_s, report.interconnect_floor_s, report.compute_floor_s))
    print(f"{tbps:>8g} {ms(sweep['basic'][-1])}  {ms(sweep['elk-full'][-1])} "
          f"{sweep['basic'][-1] / sweep['elk-full'][-1]:7.2f}x {ms(floors[-1][0])}  "
          f"{ms(floors[-1][1])}   {ms(floors[-1][2])}")

# %%
# What holds at every point: ``elk-full`` is never slower than ``basic``, neither is below
# any floor, and more bandwidth never makes a step slower. Then, from each bandwidth to the
# next, how much faster the step got: the return on the extra bandwidth.
for i, tbps in enumerate(SWEEP_TBPS):
    assert sweep["elk-full"][i] <= sweep["basic"][i] * (1 + 1e-9), tbps
    for times in sweep.values():
        assert times[i] >= max(floors[i])
for times in sweep.values():
    assert all(b <= a * (1 + 1e-9) for a, b in itertools.pairwise(times))
hbm_bound = [tbps for tbps, f in zip(SWEEP_TBPS, floors) if f[0] >= max(f[1:])]
print(f"HBM is the largest floor at {hbm_bound} TB/s")
for i in range(1, len(SWEEP_TBPS)):
    print(f"{SWEEP_TBPS[i - 1]:g} -> {SWEEP_TBPS[i]:g} TB/s: elk-full "
          f"{sweep['elk-full'][i - 1] / sweep['elk-full'][i]:.2f}x faster, basic "
          f"{sweep['basic'][i - 1] / sweep['basic'][i]:.2f}x faster")

# %%
# The line plot: per-token time against HBM bandwidth (on a logarithmic axis, one step per
# doubling), with the HBM floor falling as the bandwidth grows and the floor set by
# everything but HBM as a flat line.
fig, ax = plt.subplots(figsize=(7, 4))
for design, marker in (("basic", "s"), ("elk-full", "o")):
    ax.plot(SWEEP_TBPS, [t * 1e3 for t in sweep[design]], marker=marker, label=design)
ax.plot(SWEEP_TBPS, [f[0] * 1e3 for f in floors], "k--", linewidth=1, label="HBM floor")
ax.plot(SWEEP_TBPS, [max(f[1:]) * 1e3 for f in floors], "k:", linewidth=1,
        label="interconnect / compute floor")
ax.set_xscale("log", base=2)
ax.set_xticks(SWEEP_TBPS, [f"{t:g}" for t in SWEEP_TBPS])
ax.set_xlabel(f"HBM bandwidth of {hw.name} (TB/s)")
ax.set_ylabel("ms per decode step")
ax.set_ylim(bottom=0)
ax.set_title(f"{sweep_workload.name}, batch {sweep_workload.config['batch']}, context "
             f"{sweep_workload.config['context']} ({sweep_workload.config['layers']} layers)")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
