"""Every model of the workload zoo, full size, compiled for ICCA timing-only and simulated.

LLMs run one decode step at batch 32 with a 2,048-token context on ``ipu-pod4-hbm`` (Elk's
setting, Elk §6.1); the others at batch 1 on the same system. Prints and writes
``benchmarks/results/zoo_timing.md``.

    .venv/bin/python benchmarks/zoo_timing.py [--hw ipu-pod4-hbm] [--models llama2-13b,...]
"""

from __future__ import annotations

import argparse
import pathlib
import time

from tvm_icca.drivers.device_programs import compile_programs
from tvm_icca.workloads import get_workload, list_workloads
from result_files import write_markdown  # noqa: E402  (benchmarks/, beside this script)

ROOT = pathlib.Path(__file__).resolve().parent.parent
LLMS = ("opt-", "llama2-", "gemma2-")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hw", default="ipu-pod4-hbm")
    parser.add_argument("--models", default=",".join(list_workloads()))
    args = parser.parse_args()
    lines = [f"Timing-only simulation of the zoo on `{args.hw}` (`benchmarks/zoo_timing.py`).", "",
             "| model | config | regions | device ops | compile s | simulate s | simulated ms | compute ms | transfer ms | HBM ms |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in args.models.split(","):
        kwargs = {"batch": 32, "context": 2048} if name.startswith(LLMS) else {"batch": 1}
        config = ", ".join(f"{k} {v}" for k, v in kwargs.items())
        start = time.perf_counter()
        model = compile_programs(get_workload(name, **kwargs), args.hw)
        compile_s = time.perf_counter() - start
        start = time.perf_counter()
        report = model.simulate()
        sim_s = time.perf_counter() - start
        line = (f"| {name} | {config} | {model.num_regions} | {model.num_device_ops} | {compile_s:.1f} | "
                f"{sim_s:.2f} | {report.total_s * 1e3:.3f} | {report.compute_s * 1e3:.3f} | "
                f"{report.transfer_s * 1e3:.3f} | {report.hbm_s * 1e3:.3f} |")
        print(line, flush=True)
        lines.append(line)
    out = ROOT / "benchmarks" / "results" / "zoo_timing.md"
    write_markdown(out, "\n".join(lines))
    print(f"written {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
