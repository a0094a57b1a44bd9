"""
Read the simulated time of an LLM decode step
=============================================

This tutorial teaches how to read what the timing simulator says about a model: the headline
numbers of a :class:`~runtime_sim.timing.TimingReport` (total time, compute, transfer, idle,
the utilizations and the floors no schedule can beat), the per-operator table sorted by time
and grouped by operator kind, a timeline drawn from the report's rows, and the Perfetto trace
of the same run with what each of its tracks shows. The model is one decode step of
Llama2-13B on a four-chip IPU system with HBM, the setting of Elk §6.1.
"""

# %%
# Sizes
# -----
# The full size (the default, and what the documentation shows) is a decode step of
# Llama2-13B at batch 32 with a 2,048-token KV cache, its first two layers, in float16, on
# ``ipu-pod4-hbm``: four IPU Mk2 chips (5,888 cores) with 16 TB/s of HBM. Its weights and
# KV caches live in HBM and are preloaded into the cores' SRAM while other operators run.
# The layers of a decoder are identical, so two of them show how every layer runs, in a
# fraction of the compile time. The small configuration (``TVM_ICCA_TUTORIAL_SIZE=small``,
# used by the test suite) times the same architecture at toy width (``tiny=True``: hidden
# size 64, batch 1), on the same chip; every step is the same.
import collections
import itertools
import json
import os
import textwrap

import matplotlib.pyplot as plt

import tvm_icca
from runtime_sim.contract.metrics import metric

SIZE = os.environ.get("TVM_ICCA_TUTORIAL_SIZE", "full")
if SIZE == "small":
    workload = tvm_icca.get_workload("llama2-13b", num_layers=2, tiny=True)
else:
    workload = tvm_icca.get_workload("llama2-13b", batch=32, context=2048, num_layers=2)
hw = tvm_icca.preset("ipu-pod4-hbm")
print(workload.description)
print(f"{hw.name}: {hw.num_chips} chips, {hw.num_cores} cores, "
      f"{hw.hbm_bandwidth / 1e12:g} TB/s of HBM over {hw.hbm_controllers} controllers")

# %%
# Compile and simulate
# --------------------
# ``compile_programs`` runs the compiler's passes up to the device programs (partitioning,
# the T10 plan of every operator and, on a chip with HBM, Elk's preload schedule) without
# building the host code; ``simulate`` times those programs on the event-driven model of the
# chip. No tensor data is needed, so a 13-billion-parameter model is timed without its
# weights. ``trace=True`` also keeps the events of the timeline for the Perfetto trace.
compiled = tvm_icca.compile_programs(workload, hw, progress=False)
report = compiled.simulate(trace=True)
print(f"{compiled.num_regions} region call(s), {compiled.num_device_ops} device operators, "
      f"compiled in {compiled.compile_s:.1f} s; preload design: {compiled.preload.design}")

# %%
# The headline numbers
# --------------------
# Every number of a report has one name, one unit and one meaning, defined in
# :mod:`runtime_sim.contract.metrics` (the :doc:`/glossary`); ``metric(name)`` returns the
# definition, so the table below prints each value with its meaning. All times are seconds
# of simulated chip time for one decode step (one token per sequence of the batch).
#
# Three families:
#
# * **where the compute array's time goes**: ``compute_s`` (cores computing), ``transfer_s``
#   (cores exchanging data inside an operator: re-layouts, the shifts of the compute-shift
#   steps, replica reductions, the distribution of preloaded data) and ``idle_s`` (cores
#   waiting, mostly for loads). Steps are bulk-synchronous, so compute and transfer never
#   overlap and these three add up to ``total_s``;
# * **what runs beside it**: ``hbm_s`` (the HBM controllers busy), ``overlap_s`` (of that,
#   while an operator executes), ``host_s`` (the host links busy), ``stall_s`` (time lost to
#   contention on the links) and, with a preload schedule, ``preload_only_s``,
#   ``execute_only_s`` and ``preload_overlap_s`` (Elk's breakdown of the timeline);
# * **utilizations**: the share of the run's time a resource's peak was used.
data = report.to_dict(per_op=False)
SHOWN = ("total_s", "compute_s", "transfer_s", "idle_s", "stall_s", "hbm_s", "overlap_s",
         "host_s", "preload_only_s", "execute_only_s", "preload_overlap_s",
         "flops_utilization", "hbm_utilization", "interconnect_utilization",
         "link_bandwidth_utilization")


def shown(name: str) -> str:
    """A metric's value in the unit a person reads: microseconds or percent."""
    value = data[name]
    return f"{value * 1e6:10.2f} us" if metric(name).unit == "s" else f"{value:10.1%}   "


for name in SHOWN:
    meaning = textwrap.shorten(metric(name).meaning.replace("``", ""), 72, placeholder=" ...")
    print(f"{name:<27} {shown(name)}  {meaning}")

assert abs(report.total_s - (report.compute_s + report.transfer_s + report.idle_s)) \
    <= 1e-9 * report.total_s

# %%
# Floors
# ------
# The report bounds any schedule of these operators on this chip from below, one resource
# at a time (``runtime_sim.timing.floors`` defines each; the glossary lists them):
#
# * ``hbm_floor_s``: the distinct bytes read from HBM (``hbm_bytes``: each weight and
#   KV-cache byte once) at the full HBM bandwidth;
# * ``compute_floor_s``: the FLOPs at the peak of every core's matrix unit
#   (``compute_units_floor_s``: each operator at the peak of the unit that runs it);
# * ``interconnect_floor_s``: the bytes the cores must receive over their links (shifts,
#   re-layouts, distributions and the delivery of every load), every core receiving at its
#   full link bandwidth;
# * ``host_floor_s`` and ``inter_chip_floor_s``: the host links and the links between chips;
# * on a mesh, the cuts a load must cross: ``edge_ports_floor_s`` (HBM controllers on the
#   edges), ``controller_ports_floor_s`` and ``injection_floor_s`` (controllers inside the
#   grid), ``bisection_floor_s`` (the middle of the grid).
#
# ``run_bound_by`` names the largest and ``floor_s`` is its value; a run more than 1.5x its
# largest floor also says where the rest of its time goes (``remainder``). A decode step
# multiplies every weight with a few activations, so it sits far above its compute floor.
# ``hbm_utilization`` is exactly the HBM floor over the total time.
floors = {name: value for name, value in data.items() if name.endswith("_floor_s") and value > 0}
for name, value in sorted(floors.items(), key=lambda kv: -kv[1]):
    print(f"{name:<26} {value * 1e6:9.2f} us  {value / report.total_s:6.1%} of total_s")
print(f"total_s                    {report.total_s * 1e6:9.2f} us = "
      f"{report.total_s / report.floor_s:.2f}x the largest floor, {report.run_bound_by}")
for part, seconds in (report.remainder or {}).items():
    print(f"  remainder: {part:<22} {seconds * 1e6:9.2f} us")
assert all(report.total_s >= value for value in floors.values())
assert report.floor_s == max(floors.values())
assert abs(report.hbm_utilization - report.hbm_floor_s / report.total_s) <= 1e-9

# %%
# The operator table
# ------------------
# ``report.per_op`` has one :class:`~runtime_sim.timing.OpTiming` row per operator executed,
# in start order. Operators run one after another on the compute array; each one's
# execution (``end_s - start_s``, its *duration*) is its compute plus its transfer, and
# before it the array may wait for its inputs to arrive (``wait_s``). The columns:
#
# * ``cores``: the cores its T10 plan uses (of 5,888); ``steps``: its compute-shift steps;
# * ``start``: when it starts; ``wait``, ``dur``, ``compute``, ``transfer`` as above;
# * ``hbm``: how long its own HBM load took (it ran earlier, beside other operators, when
#   it was preloaded);
# * ``op``: the operator in the user's words, kind (``+`` its fused epilogue) and output shape.
#
# ``report.table()`` prints the same rows with the totals (``tvm-icca simulate`` prints it);
# here are the ten slowest, slowest first.
ops = report.per_op
print(f"{'cores':>5} {'start us':>9} {'wait us':>8} {'dur us':>8} {'compute':>8} "
      f"{'transfer':>8} {'hbm us':>8} {'steps':>5}  op")
for op in sorted(ops, key=lambda o: -o.duration_s)[:10]:
    print(f"{op.cores:>5} {op.start_s * 1e6:>9.2f} {op.wait_s * 1e6:>8.2f} "
          f"{op.duration_s * 1e6:>8.2f} {op.compute_s * 1e6:>8.2f} {op.transfer_s * 1e6:>8.2f} "
          f"{op.hbm_s * 1e6:>8.2f} {op.steps:>5}  {op.label}")

# %%
# How the rows add up to the headline numbers: the operators never overlap on the compute
# array; their compute and transfer sum to the report's; waits plus executions run from 0 to
# the end of the last operator; what is left of ``total_s`` after that is the return of the
# step's outputs (the logits) to the host, which ends the run.
for op in ops:
    assert abs(op.duration_s - (op.compute_s + op.transfer_s)) <= 1e-9 * report.total_s
for before, after in itertools.pairwise(ops):
    assert before.end_s <= after.start_s + 1e-12
    assert abs(before.end_s + after.wait_s - after.start_s) <= 1e-12
last_end = ops[-1].end_s
tail_s = report.total_s - last_end
print(f"sum of compute  {sum(o.compute_s for o in ops) * 1e6:9.2f} us = compute_s "
      f"{report.compute_s * 1e6:9.2f} us")
print(f"sum of transfer {sum(o.transfer_s for o in ops) * 1e6:9.2f} us = transfer_s "
      f"{report.transfer_s * 1e6:9.2f} us")
print(f"sum of waits and executions {sum(o.wait_s + o.duration_s for o in ops) * 1e6:.2f} us "
      f"= end of the last operator {last_end * 1e6:.2f} us; then {tail_s * 1e6:.2f} us "
      f"returning {report.host_out_bytes / 1e3:.1f} KB to the host")
assert abs(sum(o.compute_s for o in ops) - report.compute_s) <= 1e-9 * report.total_s
assert abs(sum(o.transfer_s for o in ops) - report.transfer_s) <= 1e-9 * report.total_s
assert abs(sum(o.wait_s + o.duration_s for o in ops) - last_end) <= 1e-9 * report.total_s
returns_end = max(o.host_out_start_s + o.host_out_s for o in ops)
assert tail_s >= 0 and abs(returns_end - report.total_s) <= 1e-9 * report.total_s

# %%
# By operator kind
# ----------------
# ``report.op_kinds`` sums each operator's time on the compute array (``time_s``: its wait
# plus its execution) by kind, the operator's name without its epilogue and shape, slowest
# first. ``matmul_transposed`` is a matmul with a transposed right-hand side: the weight
# projections, and the product of the queries with the cached keys; ``matmul`` is the
# attention weights times the cached values. Below, the same groups from the rows, split
# into compute, transfer and wait.
def kind_of(op) -> str:
    """The group ``op_kinds`` puts an operator in: its label up to the epilogue and shape."""
    return op.label.split(" [")[0].split("+")[0]


split: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
for op in ops:
    split[kind_of(op)].update(compute=op.compute_s, transfer=op.transfer_s, wait=op.wait_s)
print(f"{'kind':<18} {'ops':>4} {'time us':>9} {'share':>6} {'compute':>8} {'transfer':>8} "
      f"{'wait':>8}")
for row in report.op_kinds:
    parts = split[row["kind"]]
    print(f"{row['kind']:<18} {row['num_ops']:>4} {row['time_s'] * 1e6:>9.2f} "
          f"{row['time_s'] / report.total_s:>6.1%} {parts['compute'] * 1e6:>8.2f} "
          f"{parts['transfer'] * 1e6:>8.2f} {parts['wait'] * 1e6:>8.2f}")
    assert abs(sum(parts.values()) - row["time_s"]) <= 1e-9 * report.total_s
assert set(split) == {row["kind"] for row in report.op_kinds}
top = report.op_kinds[0]["kind"]
print(f"the most time goes to {top}")

# %%
# A picture of the run
# --------------------
# Top: the timeline, drawn from the rows. The compute array runs one operator after
# another (coloured by kind, the ten kinds with the most time; the rest grey); below it, the
# HBM loads, each operator's from ``hbm_start_s`` for ``hbm_s``. Loads that sit under
# earlier operators are the preloads of Elk's schedule; where the compute array is white,
# it waits. Bottom: each kind's time split into compute, transfer and wait.
kinds = [row["kind"] for row in report.op_kinds]
colour = {k: plt.cm.tab10(i) for i, k in enumerate(kinds[:10])}
fig, (timeline, bars) = plt.subplots(2, 1, figsize=(9, 6.5),
                                     gridspec_kw={"height_ratios": [1, 1.4]})
for op in ops:
    timeline.broken_barh([(op.start_s * 1e6, op.duration_s * 1e6)], (1.1, 0.8),
                         color=colour.get(kind_of(op), "0.7"))
    if op.hbm_s > 0:
        timeline.broken_barh([(op.hbm_start_s * 1e6, op.hbm_s * 1e6)], (0.1, 0.8),
                             color=colour.get(kind_of(op), "0.7"), alpha=0.6)
timeline.set_yticks([0.5, 1.5], ["HBM loads", "compute array"])
timeline.set_xlim(0, report.total_s * 1e6)
timeline.set_xlabel("simulated time (us)")
timeline.set_title(f"{workload.name} decode step on {hw.name}: {report.total_s * 1e6:.1f} us")
timeline.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in colour.values()],
                labels=list(colour), fontsize=7, ncol=5, loc="upper center",
                bbox_to_anchor=(0.5, -0.3))

y = range(len(kinds))
left = [0.0] * len(kinds)
for part, c in (("compute", "tab:blue"), ("transfer", "tab:orange"), ("wait", "0.75")):
    widths = [split[k][part] * 1e6 for k in kinds]
    bars.barh(y, widths, left=left, color=c, label=part)
    left = [a + b for a, b in zip(left, widths)]
bars.set_yticks(list(y), kinds, fontsize=8)
bars.invert_yaxis()
bars.set_xlabel("time on the compute array (us)")
bars.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %%
# The Perfetto trace
# ------------------
# ``write_trace`` writes the run as a Chrome trace-event JSON file (what ``tvm-icca simulate
# --trace PATH`` writes). Open https://ui.perfetto.dev, click "Open trace file" and choose
# it (``chrome://tracing`` reads it too). Each *process* is a group of tracks and each
# *thread* one track; the file names them:
#
# * ``regions / device programs``: the region calls (device programs), in execution order;
# * ``stream (<design>)``, with a preload schedule (Elk §4.5): ``preload`` holds each
#   preload instruction from its start to its completion (preloads run one after another),
#   ``execute`` each operator's execution, its distribution phase nested first;
# * ``chip <k> (cores ...) / cores``: the operators that run on that chip's cores, each with
#   its phases nested inside (``distribute``, ``relayout``, ``steps``, ``reduce``,
#   ``epilogue``); an operator spread over several chips appears on each;
# * ``interconnect``: one track per class of links, the time they are in use: the on-chip
#   links (re-layouts, the shifts over an operator's steps, reductions, distributions), the
#   inter-chip links, and the delivery of HBM and host loads to the cores;
# * ``HBM / controller <h> (chip <k>)``: each HBM controller's loads;
# * ``host / host link chip <k>``: inputs sent by the host to each chip.
#
# Clicking an event shows its arguments: the operator's generated name (``op``), its cores,
# steps, compute and transfer times, bytes moved, and for a load whether it was prefetched.
path = f"{workload.name}_decode_trace.json"
report.write_trace(path)
with open(path, encoding="utf-8") as f:
    events = json.load(f)["traceEvents"]
processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
spans = collections.Counter((e["pid"], e["tid"]) for e in events if e["ph"] == "X")
print(f"wrote {path}: {len(events)} events")
for pid, process in processes.items():
    tracks = [(name, spans[pid, tid]) for (p, tid), name in sorted(threads.items()) if p == pid]
    for name, count in tracks[:4]:
        print(f"  {process:<28} {name:<32} {count:>5} spans")
    if len(tracks) > 4:
        print(f"  {process:<28} ... {len(tracks) - 4} more tracks like these")

# %%
# The trace holds what the report does: every operator once on the ``execute`` track, on
# the cores of its chips, and a span per HBM controller for every operator with an HBM load.
execute_track = next(key for key, name in threads.items()
                     if processes[key[0]].startswith("stream") and name == "execute")
executes = [e for e in events if e["ph"] == "X" and (e["pid"], e["tid"]) == execute_track
            and e.get("cat") == "execute"]
assert len(executes) == len(ops)
loads = sum(1 for op in ops if op.hbm_s > 0)
for (pid, tid), name in threads.items():
    if processes[pid] == "HBM":
        assert spans[pid, tid] == loads, name
assert sum(1 for n in processes.values() if n.startswith("chip ")) == hw.num_chips
