"""``tvm-icca models``: list the workload zoo, optionally with operator counts.

``--ops`` builds every model at its full size (``--batch``, ``--context``), counts its Relax
operators after import and, after partitioning for ``--hw``, how many are offloaded to the
chip and how many stay on the host; Elk's Table 2 total is shown where Elk reports one.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tvm_icca.cli.args import add_hardware_argument, positive_int


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("models", help="list the workload zoo (tvm_icca.workloads)")
    parser.add_argument("names", nargs="*", help="only these models")
    parser.add_argument("--ops", action="store_true",
                        help="count Relax ops after import and after partitioning (slower)")
    parser.add_argument("--batch", type=positive_int, default=32, help="batch size for --ops (default 32)")
    parser.add_argument("--context", type=positive_int, default=2048,
                        help="LLM context / BERT sequence length for --ops (default 2048; BERT 512 max)")
    add_hardware_argument(parser, "chip to partition for")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=_run)
    return parser


def op_count_row(name: str, batch: int, context: int, hw: Any) -> dict[str, Any]:
    """Import and partition counts of one full-size model (see the module docstring)."""
    from tvm_icca.cli.simulate_command import (  # pylint: disable=import-outside-toplevel
        workload_kwargs,
    )
    from tvm_icca.partition.partitioner import (  # pylint: disable=import-outside-toplevel
        partition_for_icca,
    )
    from tvm_icca.model_pass.calls import (  # pylint: disable=import-outside-toplevel
        partitioned_op_counts,
    )
    from tvm_icca.workloads import (  # pylint: disable=import-outside-toplevel
        get_workload,
        workload_info,
    )

    info = workload_info(name)
    if info["sequence_arg"] == "seq_len":
        context = min(context, 512)
    workload = get_workload(name, **workload_kwargs(name, batch, context, None, None))
    counts = partitioned_op_counts(partition_for_icca(workload.mod, hw))
    return {
        "name": name,
        "layers": _layers(workload.config),
        "parameters": workload.num_parameters,
        "relax_ops": workload.num_ops,
        "offloaded": sum(counts["offloaded"].values()),
        "host": sum(counts["host"].values()),
        "host_ops": counts["host"],
        "elk_table2": info["elk_ops"],
    }


def _run(args: argparse.Namespace) -> int:
    from tvm_icca.hardware_choice import resolve_hardware  # pylint: disable=import-outside-toplevel
    from tvm_icca.workloads import (  # pylint: disable=import-outside-toplevel
        canonical_name,
        list_workloads,
        workload_info,  # pylint: disable=import-outside-toplevel
    )

    try:
        names = [canonical_name(n) for n in args.names] if args.names else list_workloads()
    except KeyError as err:
        print(f"tvm-icca: error: {err.args[0]}", file=sys.stderr)
        return 2
    if not args.ops:
        rows = [workload_info(n) for n in names]
        if args.json:
            print(json.dumps(rows, indent=1))
        else:
            for row in rows:
                phases = f" [phases: {', '.join(row['phases'])}]" if row["phases"] else ""
                print(f"{row['name']:12s} {row['description']}{phases}")
        return 0

    hw = resolve_hardware(args.hw)
    rows = []
    for name in _progress(names):
        rows.append(op_count_row(name, args.batch, args.context, hw))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"Relax operators (batch {args.batch}, context {args.context}; partitioned for {hw.name})")
    print(f"{'model':12s} {'layers':>6s} {'params':>8s} {'ops':>6s} {'chip':>6s} {'host':>6s} {'Elk N':>6s}")
    for r in rows:
        elk = f"{r['elk_table2']:,}" if r["elk_table2"] else "-"
        print(f"{r['name']:12s} {r['layers']:>6} {r['parameters'] / 1e9:>7.2f}B {r['relax_ops']:>6,} "
              f"{r['offloaded']:>6,} {r['host']:>6,} {elk:>6s}")
    return 0


def _layers(config: dict[str, Any]) -> int:
    """Layers (transformers), trunk depth (NeRF) or residual blocks (ResNet) of a config."""
    if "layers" in config:
        return int(config["layers"])
    if "depth" in config:
        return int(config["depth"])
    return int(sum(config.get("blocks", ())))


def _progress(names: list[str]):
    try:
        from tqdm import tqdm  # pylint: disable=import-outside-toplevel
    except ImportError:
        return names
    return tqdm(names, desc="building and partitioning", unit="model")
