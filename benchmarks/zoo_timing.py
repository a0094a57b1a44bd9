"""Every model of the workload zoo, full size, compiled for ICCA timing-only and simulated.

LLMs run one decode step at batch 32 with a 2,048-token context on ``ipu-pod4-hbm`` (Elk's
setting, Elk §6.1); the others at batch 1 on the same system. ``--batch`` and ``--context``
set the LLMs' step (a board with 12-32 GB of DRAM holds a 7B model's KV cache at batch 1, not
at 32). A model whose state does not fit the chip's HBM or DRAM is a row saying so, with the
compiler's reason. Prints and writes ``benchmarks/results/zoo_timing.md``, or
``zoo_timing_<hw>.md`` on another chip.

    .venv/bin/python benchmarks/zoo_timing.py [--hw ipu-pod4-hbm] [--models llama2-13b,...]
    .venv/bin/python benchmarks/zoo_timing.py --hw tt-blackhole --batch 1 --models llama2-7b
"""

from __future__ import annotations

import argparse
import pathlib
import time

from runtime_sim.contract.errors import HbmCapacityError, PlanNotFoundError
from tvm_icca.drivers.device_programs import compile_programs
from tvm_icca.workloads import get_workload, list_workloads
from result_files import write_markdown  # noqa: E402  (benchmarks/, beside this script)

ROOT = pathlib.Path(__file__).resolve().parent.parent
LLMS = ("opt-", "llama2-", "gemma2-")
#: The chip of Elk's evaluation (§6.1), whose table is ``zoo_timing.md``.
ELK_CHIP = "ipu-pod4-hbm"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hw", default=ELK_CHIP)
    parser.add_argument("--models", default=",".join(list_workloads()))
    parser.add_argument("--batch", type=int, default=32, help="the LLMs' batch (default 32)")
    parser.add_argument("--context", type=int, default=2048, help="the LLMs' KV cache length")
    args = parser.parse_args()
    lines = [f"Timing-only simulation of the zoo on `{args.hw}` (`benchmarks/zoo_timing.py`). "
             "x floor: the simulated time over the largest of the run's floors (HBM or DRAM "
             "bytes, compute, interconnect, host), which the bound column names.", "",
             "| model | config | regions | device ops | compile s | simulate s | simulated ms | compute ms | "
             "transfer ms | HBM ms | x floor | bound |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name in args.models.split(","):
        llm = name.startswith(LLMS)
        kwargs = {"batch": args.batch, "context": args.context} if llm else {"batch": 1}
        config = ", ".join(f"{k} {v}" for k, v in kwargs.items())
        start = time.perf_counter()
        try:
            model = compile_programs(get_workload(name, **kwargs), args.hw)
        except (HbmCapacityError, PlanNotFoundError) as err:
            # the compiler's first sentence: what is kept, and how much room there is
            reason = str(err).splitlines()[0].split("; the largest")[0].replace("|", "/")
            line = f"| {name} | {config} | does not fit: {type(err).__name__}: {reason} ||||||||||"
            print(line, flush=True)
            lines.append(line)
            continue
        compile_s = time.perf_counter() - start
        start = time.perf_counter()
        report = model.simulate()
        sim_s = time.perf_counter() - start
        line = (f"| {name} | {config} | {model.num_regions} | {model.num_device_ops} | {compile_s:.1f} | "
                f"{sim_s:.2f} | {report.total_s * 1e3:.3f} | {report.compute_s * 1e3:.3f} | "
                f"{report.transfer_s * 1e3:.3f} | {report.hbm_s * 1e3:.3f} | "
                f"{report.total_s / report.floor_s:.2f} | {report.run_bound_by} |")
        print(line, flush=True)
        lines.append(line)
    stem = "zoo_timing" if args.hw == ELK_CHIP else f"zoo_timing_{args.hw}"
    out = ROOT / "benchmarks" / "results" / f"{stem}.md"
    write_markdown(out, "\n".join(lines))
    print(f"written {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
