"""Does a sweep on two workers finish before the same sweep on one? (issue 40, item 3)

Each sweep below runs twice, cold, as a user runs it: ``tvm-icca dse SPEC --jobs 1`` and
``--jobs 2``, each in a fresh process with a fresh results file and no plan cache carried
over (``--jobs 2`` keeps its workers' shared plans in a temporary directory; ``--jobs 1``
keeps them in memory). The sweeps are Llama2-13B decode (batch 32, context 2,048, the first
``--layers`` layers) on ``ipu-pod4-hbm`` variants, chosen to cover how points share plan
searches (:func:`tvm_icca.dse.points.plan_group`):

* ``hbm x2``: two points differing only in HBM bandwidth (one plan group: the second point
  reuses every search of the first);
* ``link x2``: two points differing in link bandwidth (two groups: nothing shared);
* ``hbm x2, 2 designs``: four points, one group;
* ``link x3, 2 designs``: six points, three groups.

Wall seconds of the whole command (its start-up included) and the speedup. Writes
``benchmarks/results/dse_jobs.{md,json}``.

    .venv/bin/python benchmarks/dse_jobs.py [--layers 2]
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from result_files import write_json, write_markdown  # noqa: E402  (benchmarks/, beside this script)
from tvm_icca.dse import expand, load_spec  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"

#: (name, designs, the [grid] lines) of each sweep.
SWEEPS = (
    ("hbm x2", ["elk-full"], "hbm_bandwidth = [8e12, 16e12]"),
    ("link x2", ["elk-full"], "link_bandwidth = [5.5e9, 11e9]"),
    ("hbm x2, 2 designs", ["static", "elk-full"], "hbm_bandwidth = [8e12, 16e12]"),
    ("link x3, 2 designs", ["static", "elk-full"], "link_bandwidth = [5.5e9, 8e9, 11e9]"),
)


def spec_text(name: str, designs: list[str], grid: str, layers: int) -> str:
    """A study file of one sweep."""
    quoted = ", ".join(f'"{d}"' for d in designs)
    return (f'name = "{name}"\ndesigns = [{quoted}]\n\n[hardware]\nbase = "ipu-pod4-hbm"\n\n'
            f'[grid]\n{grid}\n\n[[workloads]]\nname = "llama2-13b"\nbatch = 32\n'
            f'context = 2048\nnum_layers = {layers}\n')


def timed_sweep(spec: pathlib.Path, jobs: int, results: pathlib.Path) -> float:
    """Wall seconds of ``tvm-icca dse SPEC --jobs JOBS`` in a fresh process."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tvm_icca.cli", "dse", str(spec), "--jobs", str(jobs),
                    "--results", str(results), "--no-progress"], check=True,
                   stdout=subprocess.DEVNULL, cwd=ROOT)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS / "dse_jobs"))
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="icca-dse-jobs-") as tmp:
        for k, (name, designs, grid) in enumerate(SWEEPS):
            spec = pathlib.Path(tmp) / f"sweep{k}.toml"
            spec.write_text(spec_text(f"sweep{k}", designs, grid, args.layers), encoding="utf-8")
            expanded = expand(load_spec(spec))
            points, groups = len(expanded), len({p.group for p in expanded})
            wall = {jobs: timed_sweep(spec, jobs, pathlib.Path(tmp) / f"sweep{k}-jobs{jobs}.jsonl")
                    for jobs in (1, 2)}
            rows.append({"sweep": name, "points": points, "plan_groups": groups, "layers": args.layers,
                         "jobs1_s": wall[1], "jobs2_s": wall[2], "speedup": wall[1] / wall[2]})
            print(f"{name}: {points} points, --jobs 1 {wall[1]:.1f} s, --jobs 2 {wall[2]:.1f} s",
                  flush=True)
    out = pathlib.Path(args.out)
    write_json(out.with_suffix(".json"), rows)
    lines = [f"# Sweeps on one and two workers: Llama2-13B decode, {args.layers} layers, "
             "ipu-pod4-hbm variants", "",
             "Wall seconds of `tvm-icca dse SPEC --jobs N`, each run cold in a fresh process "
             "(start-up included) on this 2-core machine.", "",
             "Plan groups: sets of points that ask for the same operator plans "
             "(`tvm_icca.dse.points.plan_group`); a group's first point searches them and the "
             "others wait for it.", "",
             "| sweep | points | plan groups | --jobs 1 s | --jobs 2 s | speedup |",
             "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['sweep']} | {r['points']} | {r['plan_groups']} | {r['jobs1_s']:.1f} | "
              f"{r['jobs2_s']:.1f} | {r['speedup']:.2f}x |" for r in rows]
    slower = [r for r in rows if r["speedup"] <= 1.0]
    if slower:
        lines += ["", "Not faster on two workers: " + "; ".join(
            f"{r['sweep']} ({r['plan_groups']} plan group{'s' if r['plan_groups'] > 1 else ''}, "
            f"{r['speedup']:.2f}x)" for r in slower) + "."]
    write_markdown(out.with_suffix(".md"), "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
