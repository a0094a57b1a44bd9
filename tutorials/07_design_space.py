"""
Exploring a chip design with ``tvm-icca dse``
=============================================

This tutorial teaches how a chip architect explores a design space with ``tvm-icca dse``
and ``tvm_icca.dse``: write a spec that sweeps HBM bandwidth and link bandwidth for an LLM
decode step under two Elk preload designs, list its points, run it, read the results file
into a table, see how a chip that cannot hold the model is recorded, resume the sweep
without recomputing anything, draw the report with its HBM, compute and interconnect
floors, read off which resource bounds each chip, and find the Pareto front of time per
token against the chip's SRAM.
"""

# %%
# Sizes
# -----
# The full size (the default, and what the documentation shows) sweeps one decode step of
# Llama2-13B at batch 32 with 2,048-token KV caches, in float16, on variants of
# ``ipu-pod4-hbm`` (four IPU Mk2 chips, 5,888 cores, 16 HBM controllers). It keeps the first
# two of the model's 40 layers: the layers are identical, so two show how every layer is
# scheduled, and each point compiles in seconds instead of minutes. The grid is kept to
# 2 x 2 chips so that the whole tutorial runs in about a minute and a half on a 2-core
# machine; a real study is the same spec with longer lists (see the end).
#
# The small configuration (``TVM_ICCA_TUTORIAL_SIZE=small``, used by the test suite) runs
# the same model at toy width (``tiny=True``: hidden size 64) on one of the four chips
# (1,472 cores, 4 HBM controllers) at a quarter of the HBM bandwidths below (1 and 16 TB/s);
# every step and every conclusion is the same.
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import matplotlib.pyplot as plt
import pandas

import tvm_icca
import tvm_icca.dse

SIZE = os.environ.get("TVM_ICCA_TUTORIAL_SIZE", "full")
workdir = tempfile.mkdtemp(prefix="icca-dse-")
base = tvm_icca.preset("ipu-pod4-hbm")
print(f"{base.name}: {base.num_cores} cores, {base.sram_bytes_per_core // 1024} KiB of SRAM "
      f"each, {base.link_bandwidth / 1e9:g} GB/s per link, {base.hbm_bandwidth / 1e12:g} TB/s "
      f"of HBM")

# %%
# The spec
# --------
# A study is one TOML file (YAML works too, with ``pip install 'tvm-icca[dse]'``). It
# names a base chip (``[hardware]``), the :class:`~tvm_icca.HardwareSpec` fields to sweep
# (``[grid]``: every combination of the lists is a chip), optional hand-picked chips
# (``[[points]]``), the workloads with their sizes (``[[workloads]]``: a zoo name and the
# arguments of :func:`~tvm_icca.get_workload`, or an ONNX file) and the Elk preload designs
# (Elk §6.1) to compare. :doc:`/dse` describes every key.
#
# This one asks the question of Elk §6.4 on a small scale: how do HBM bandwidth (4 and
# 64 TB/s for the four chips) and the bandwidth of each core's link (IPU Mk2's 5.5 GB/s and
# twice that) change the time of a decode step, under ``static`` (one fixed split of SRAM
# between executing and preloading) and ``elk-full`` (Elk's schedule)? The explicit points
# are two chips with less SRAM per core than the IPU's 624 KiB: 16 KiB, on which the model
# cannot be placed (we will see how the study records it), and half, 312 KiB, with the
# fastest memories of the grid (a cheaper chip: is it slower?).
if SIZE == "small":  # one of the four chips, with a quarter of their HBM bandwidths
    CHIPS, HBM = "num_chips = 1\nnum_cores = 1472\nhbm_controllers = 4\n", ("1e12", "16e12")
else:
    CHIPS, HBM = "", ("4e12", "64e12")
HBM_LO, HBM_HI = map(float, HBM)
spec_text = textwrap.dedent("""\
    name = "llama-decode"
    description = "Llama2-13B decode: HBM x link bandwidth, static vs elk-full"
    designs = ["static", "elk-full"]

    [hardware]
    base = "ipu-pod4-hbm"
    {chips}
    [grid]
    hbm_bandwidth = [{hbm[0]}, {hbm[1]}]
    link_bandwidth = [5.5e9, 11e9]

    [[points]]
    hbm_bandwidth = {hbm[0]}
    link_bandwidth = 5.5e9
    sram_bytes_per_core = 16384

    [[points]]
    hbm_bandwidth = {hbm[1]}
    link_bandwidth = 11e9
    sram_bytes_per_core = 319488

    [[workloads]]
    name = "llama2-13b"
    batch = 32
    context = 2048
    num_layers = 2
    """).format(chips=CHIPS, hbm=HBM)
if SIZE == "small":
    spec_text += "tiny = true\n"
spec_path = os.path.join(workdir, "llama-decode.toml")
with open(spec_path, "w", encoding="utf-8") as f:
    f.write(spec_text)
print(spec_text)

# %%
# The points
# ----------
# A *point* is one chip, one workload instance and one design: here (2 x 2 grid chips + 2
# explicit chips) x 1 workload x 2 designs = 12 points. ``dry_run=True`` (the command line's
# ``tvm-icca dse llama-decode.toml --dry-run``) loads and checks the spec, lists the points
# and computes nothing. Loading checks everything before any point runs: every value must
# make a valid chip and every workload must build, and a mistake (a misspelt field, say) is
# one :class:`~tvm_icca.InvalidSpecError` naming the key.
#
# Each point has a *key*, the SHA-256 of everything that decides its result: the whole
# resolved chip, the workload and its arguments, the design. The results file knows which
# points are done by their keys. Points are ordered so that chips differing only in
# bandwidths come one after another: a worker keeps its plan cache while it works on them.
plan = tvm_icca.dse.run(spec_path, dry_run=True)
for point in plan.points:
    done = "done" if point.key in plan.done_before else "todo"
    print(f"{point.index:>3}  {done}  {point.key[:12]}  {point.label()}")
print(plan.describe())
assert len(plan.points) == (2 * 2 + 2) * 2 and len(plan.pending) == len(plan.points)

# %%
# Running the sweep
# -----------------
# ``tvm-icca dse SPEC`` compiles every pending point with the model-level compiler (the
# passes of ``tvm.compile``), times it with the timing simulator and appends its row to the
# results file (here ``llama-decode.jsonl`` beside the spec) as soon as the point is done.
# On a terminal a progress bar shows points done, running and not fitting, with the time
# left.
#
# ``--jobs N`` computes N points at once, each in its own worker process; the default is
# one per CPU. This tutorial uses one, so its timing does not depend on the machine. The
# workers are started with ``spawn``, so they import the script that started them: from
# your own script, call ``tvm_icca.dse.run(spec, jobs=2)`` under
# ``if __name__ == "__main__":``. This page runs the command line instead, as an architect
# would::
#
#     tvm-icca dse llama-decode.toml --jobs 1
#
# Beyond one machine, the same sweep runs as Ray tasks (``pip install 'tvm-icca[dse]'`` on
# every node), with ``--jobs`` bounding the points in flight; the driver still writes every
# row, so resuming works the same way::
#
#     ray start --head --port=6379                   # on the head node
#     ray start --address=HEAD_IP:6379               # on every other node
#     tvm-icca dse llama-decode.toml --ray auto      # on the head node
#
# :doc:`/dse` shows a SLURM job that does this.
start = time.perf_counter()
done = subprocess.run([sys.executable, "-m", "tvm_icca.cli", "dse", spec_path, "--jobs", "1"],
                      capture_output=True, text=True, check=False)
if done.returncode:
    raise RuntimeError(f"tvm-icca dse failed:\n{done.stdout}\n{done.stderr}")
print(done.stdout.strip())
print(f"wall time of the sweep: {time.perf_counter() - start:.1f} s")

# %%
# The results
# -----------
# The results file is JSON lines, one object per point: the inputs (the base chip, every
# swept field, the workload and its arguments, the design), ``status`` and ``reason``, and
# for a point that ran, the timing report's summary (:doc:`/glossary` defines every column).
# :func:`tvm_icca.dse.read_rows` reads it. The table below shows, per point:
#
# * ``HBM``, ``link``: the swept bandwidths (TB/s for the four chips, GB/s per link), and
#   ``SRAM``, the KiB per core;
# * ``us/token``: ``time_per_token_s`` in microseconds: ``total_s``, the simulated time of one
#   decode step, over the 32 tokens it makes (``tokens_per_run``: one per sequence);
# * three of the row's *floors* (microseconds per token too), times no schedule can beat: ``HBM fl``
#   (``hbm_floor_s``: the distinct bytes read from HBM over the HBM bandwidth), ``FLOP fl``
#   (``compute_floor_s``: the FLOPs at the chip's peak matrix rate) and ``ic fl``
#   (``interconnect_floor_s``: the bytes the links must carry, each loaded byte's delivery
#   to its cores included, over the aggregate bandwidth of the cores' ports); a row has a
#   floor for every resource the run can saturate (host links, and on a mesh its edge ports,
#   controller ports and bisection: :doc:`/glossary`);
# * ``bound by``: ``run_bound_by``, the resource with the largest of all the floors;
# * ``load``: ``load_bound_by``, the cut that limits the step's longest off-chip load:
#   ``hbm`` (the controllers), ``ports`` (the cores' links into the exchange) or, on a mesh,
#   ``edge ports``, ``links`` and others;
# * ``compile``: the seconds this point took to compile.
results = plan.results
rows = tvm_icca.dse.read_rows(results)
FLOORS = ("hbm_floor_s", "compute_floor_s", "interconnect_floor_s")


def us(seconds: float) -> str:
    return f"{seconds * 1e6:8.2f}"


print(f"{'HBM':>4} {'link':>5} {'SRAM':>5} {'design':<9} {'status':<12} {'us/token':>8} "
      f"{'HBM fl':>8} {'FLOP fl':>8} {'ic fl':>8} {'bound by':<12} {'load':<6} {'compile':>7}")
for r in rows:
    head = (f"{r['hbm_bandwidth'] / 1e12:>4g} {r['link_bandwidth'] / 1e9:>5g} "
            f"{r['sram_bytes_per_core'] // 1024:>5} {r['design']:<9} {r['status']:<12}")
    if r["status"] == "ok":
        per = r["tokens_per_run"]
        print(f"{head} {us(r['time_per_token_s'])} {us(r['hbm_floor_s'] / per)} "
              f"{us(r['compute_floor_s'] / per)} {us(r['interconnect_floor_s'] / per)} "
              f"{r['run_bound_by']:<12} {r['load_bound_by']:<6} "
              f"{r['compile_s']:6.1f}s")
    else:
        print(f"{head} {'-':>8} {'-':>8} {'-':>8} {'-':>8} {'-':<12} {'-':<6} "
              f"{r['compile_s']:6.1f}s")
assert len(rows) == len(plan.points)
assert {r["key"] for r in rows} == {p.key for p in plan.points}
assert all(r["total_s"] >= r["floor_s"] >= max(r[name] for name in FLOORS)
           and r["tokens_per_run"] == 32 and r["time_per_token_s"] == r["total_s"] / 32
           for r in rows if r["status"] == "ok")

# %%
# A chip the model does not fit
# -----------------------------
# The 16 KiB chip did not stop the sweep. Its points are rows like the others, with
# ``status`` ``does_not_fit`` and the compiler's reason: an operator for which no execution
# plan fits in the cores' SRAM. (A point that fails for another reason is ``failed``, with
# the error.) They have no timing columns, only how long the compiler took to give up.
tight = [r for r in rows if r["sram_bytes_per_core"] == 16384]
for r in tight:
    print(f"{r['design']}: {r['status']}\n  {textwrap.shorten(r['reason'], 300)}")
assert len(tight) == 2
assert all(r["status"] == "does_not_fit" and r["reason"].startswith("PlanNotFoundError")
           and "total_s" not in r for r in tight)
assert all(r["status"] == "ok" for r in rows if r not in tight)

# %%
# Resuming
# --------
# A sweep can be stopped at any moment (Ctrl-C, a killed job, a lost node): every finished
# point already has its row, written whole. Running the same command again computes only
# the points without a row, whatever the status of the others, so an interrupted study ends
# with exactly one row per point. ``--limit N`` computes at most N more points per run, for
# a study done in slices. Here everything is done, so a second run (from Python this time)
# computes nothing and leaves the file as it was.
again = tvm_icca.dse.run(spec_path, jobs=1, progress=False)
print(again.describe())
rows_again = tvm_icca.dse.read_rows(results)
assert again.pending == [] and sum(again.counts.values()) == 0
assert [r["key"] for r in rows_again] == [r["key"] for r in rows]
# To recompute points (after a compiler change, say), delete their lines or the file.

# %%
# The report
# ----------
# ``tvm-icca dse report llama-decode.jsonl --format csv`` (:func:`tvm_icca.dse.write_report`
# in Python) writes ``report.md``: the files of the report with the command and commit that
# made each, the Pareto fronts, and the table of every point with its time per token, Elk's
# breakdown and the utilizations; ``table.csv`` (``--format parquet``: ``table.parquet``),
# every column for pandas or a spreadsheet; one plot per swept input, time per token against
# that input, one line per design, one panel per workload and combination of the other
# swept inputs, each point's marker naming the resource that bounds it and every floor that
# bounds a point dashed (the least over the designs at each point, what the best schedule
# would have to beat); and the Pareto plots.
report_dir = os.path.join(workdir, "report")
written = tvm_icca.dse.write_report(results, report_dir, formats=["md", "csv"])
for path in written:
    print(os.path.relpath(path, workdir))
table = pandas.read_csv(os.path.join(report_dir, "table.csv"))
print(table[["hbm_bandwidth", "link_bandwidth", "sram_bytes_per_core", "design", "status",
             "time_per_token_s", "run_bound_by", "pareto_sram"]].to_string(index=False))
assert len(table) == len(rows)

# %%
# The plot against HBM bandwidth. Its panels are the link bandwidths and SRAM sizes; the
# 16 KiB panel is empty because no point of it fits, and the 312 KiB panel has one HBM
# bandwidth: a marker per design, no line.
image = plt.imread(os.path.join(report_dir, "hbm_bandwidth.png"))
fig, ax = plt.subplots(figsize=(image.shape[1] / 110, image.shape[0] / 110))
ax.imshow(image)
ax.set_axis_off()
fig.tight_layout(pad=0)
plt.show()

# %%
# The Pareto front
# ----------------
# Which chips are worth building? A faster chip that costs more and a cheaper one that is
# slower are both candidates; a chip that is slower *and* costs more than another is not.
# The chips no other chip beats on both counts are the *Pareto front*. The report draws time
# per token against a cost proxy, the SRAM of the whole system (``sram_bytes_per_core`` x
# ``num_cores``, ``system_sram_bytes``), and, when the chip has an energy model, against
# energy per token. The front's points are stars joined by the front's step line, labelled
# with the inputs that set them apart; ``pareto_sram`` in the table marks them. Here the
# 312 KiB chip has half the SRAM of the others: the front says whether its time per token
# is worth that saving against the fastest 624 KiB chip.
image = plt.imread(os.path.join(report_dir, "pareto_sram.png"))
fig, ax = plt.subplots(figsize=(image.shape[1] / 110, image.shape[0] / 110))
ax.imshow(image)
ax.set_axis_off()
fig.tight_layout(pad=0)
plt.show()

front = table[table["pareto_sram"]].sort_values("time_per_token_s").to_dict("records")
for r in front:
    print(f"on the front: {r['sram_bytes_per_core'] // 1024} KiB per core, "
          f"{r['hbm_bandwidth'] / 1e12:g} TB/s, {r['link_bandwidth'] / 1e9:g} GB/s, "
          f"{r['design']}: {r['time_per_token_s'] * 1e6:.2f} us per token")
dominated = table[(table["status"] == "ok") & ~table["pareto_sram"]]
print(f"{len(dominated)} of {int((table['status'] == 'ok').sum())} points are dominated: another "
      "point is as fast or faster with no more SRAM")
half = [r for r in rows if r["sram_bytes_per_core"] == 319488]
fastest = min(r["time_per_token_s"] for r in rows if r["status"] == "ok")
# the fastest chip is on the front, and so is the best 312 KiB point: nothing has less SRAM
assert any(r["time_per_token_s"] == fastest for r in front)
assert any(r["sram_bytes_per_core"] == 319488 for r in front)
assert all(r["status"] == "ok" for r in half)

# %%
# Reading the design space
# ------------------------
# What the rows say, checked below on the numbers:
#
# * no point beats its floors: each floor is a cost some resource must pay, whatever the
#   schedule;
# * more HBM bandwidth never makes a step slower;
# * at 4 TB/s the HBM floor is the largest and the step's longest load is bound by the HBM
#   controllers: the chip is HBM-bound;
# * at 64 TB/s the HBM floor has dropped below the interconnect floor, and the longest load
#   is bound by the cores' ports: every loaded byte must still cross a link into its core.
#   With 5.5 GB/s links the chip is now interconnect-bound, and doubling the link bandwidth
#   pays more than it did at 4 TB/s; with 11 GB/s links the largest floor of this two-layer
#   sketch is the host link that returns its logits (a whole model's layers would outweigh it);
# * where HBM bounds the step (4 TB/s) the two designs are within a percent of each other:
#   one resource dominates and leaves a schedule little to win. Where the links bound it
#   (64 TB/s), Elk-Full can be several percent faster (about 6% with 5.5 GB/s links at full
#   size): its execution plans receive less activation over the links the loads also cross.
#   Tutorial 4 (:doc:`/tutorials/04_hbm_elk_designs`) shows the designs where they differ most.
#
# This is the conclusion of Elk §6.4: buying HBM bandwidth pays only while the interconnect
# can deliver what HBM supplies; past that, HBM and link bandwidth have to grow together.
ok = {(r["hbm_bandwidth"], r["link_bandwidth"], r["design"]): r
      for r in rows if r["status"] == "ok" and r["sram_bytes_per_core"] == base.sram_bytes_per_core}
HBMS, LINKS, DESIGNS = (HBM_LO, HBM_HI), (5.5e9, 11e9), ("static", "elk-full")
for r in ok.values():
    assert r["total_s"] >= max(r[name] for name in FLOORS) * (1 - 1e-9)
for link in LINKS:
    for design in DESIGNS:
        assert ok[HBM_HI, link, design]["total_s"] <= ok[HBM_LO, link, design]["total_s"]
gain = {}
for hbm in HBMS:
    for link in LINKS:
        row = ok[hbm, link, "elk-full"]
        ratio = row["total_s"] / ok[hbm, link, "static"]["total_s"]
        print(f"{hbm / 1e12:>2g} TB/s, {link / 1e9:>3g} GB/s: bound by {row['run_bound_by']:<12} "
              f"longest load bound by {row['load_bound_by']:<5}  elk-full / static = "
              f"{ratio:.3f}")
        assert ratio <= 1.02  # Elk-Full's search includes Static's schedule
        if hbm == HBM_LO:
            assert abs(ratio - 1) < 0.02
    gain[hbm] = ok[hbm, 5.5e9, "elk-full"]["total_s"] / ok[hbm, 11e9, "elk-full"]["total_s"]
for hbm in HBMS:
    print(f"elk-full at {hbm / 1e12:g} TB/s: doubling the links makes the step "
          f"{gain[hbm]:.3f}x faster")
for link in LINKS:
    assert ok[HBM_LO, link, "elk-full"]["run_bound_by"] == "hbm"
    assert ok[HBM_LO, link, "elk-full"]["load_bound_by"] == "hbm"
    fast = ok[HBM_HI, link, "elk-full"]
    assert fast["interconnect_floor_s"] > fast["hbm_floor_s"]
    assert fast["run_bound_by"] in ("interconnect", "host")
    assert fast["load_bound_by"] == "ports"
assert ok[HBM_HI, 5.5e9, "elk-full"]["run_bound_by"] == "interconnect"
assert gain[HBM_HI] > gain[HBM_LO]

# %%
# A real study
# ------------
# The spec above is a sketch. A study an architect would act on keeps the same form with
# longer lists and the whole model: every layer (drop ``num_layers``), HBM bandwidth from 2
# to 32 TB/s in doublings, link bandwidths of 5.5, 11 and 22 GB/s, ``topology = ["all-to-all",
# "mesh"]``, more LLMs (each ``[[workloads]]`` entry, or a list such as ``context = [2048,
# 4096]``, is one more axis) and all of ``basic``, ``static``, ``elk-dyn``, ``elk-full``,
# ``ideal``. That is hundreds of points; run it with ``--jobs`` set to the machine's cores,
# or on a Ray cluster, and let it resume across interruptions. The report then has one plot
# per axis, and ``report.md`` the full table.
