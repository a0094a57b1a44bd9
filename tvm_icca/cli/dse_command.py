"""``tvm-icca dse``: a design-space exploration over chips, workloads and preload designs.

Examples::

    tvm-icca dse hbm-sweep.toml --dry-run          # the points, and which are done
    tvm-icca dse hbm-sweep.toml --jobs 2           # compute the missing points locally
    tvm-icca dse hbm-sweep.toml --ray auto         # ... on the Ray cluster (ray start)
    tvm-icca dse report hbm-sweep.jsonl --out hbm  # tables, plots, Pareto fronts
    tvm-icca dse report hbm-sweep.jsonl --format csv,parquet   # ... and table.csv/.parquet
    tvm-icca dse rerun hbm-sweep.jsonl --rows 0,5  # re-run rows from what they stored

The spec format is :mod:`tvm_icca.dse.spec`'s (and the documentation's DSE page). A sweep
appends one row per point to its results file as points complete; run the same command again
after an interruption and only the missing points are computed; points whose chip changed
since their rows were written (a preset edited) are named with the fields that changed, then
computed again. ``dse rerun`` exits 0 when every re-run row reproduces its stored row, 1 when
one does not (or cannot be re-run), 2 on a usage error. A SIGINT (Ctrl-C) or SIGTERM stops a
sweep within seconds, keeping every finished row, with one line saying how many and exit
status 130 or 143 (128 + the signal); a second one ends it at once.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from runtime_sim.contract.errors import InvalidSpecError
from tvm_icca.cli.args import UsageError, add_progress_argument, existing_file, positive_int

#: The word that makes ``tvm-icca dse`` report on a results file instead of running a spec.
REPORT = "report"
#: The word that makes ``tvm-icca dse`` re-run rows of a results file and compare them.
RERUN = "rerun"


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "dse", help="design-space exploration: sweep chips, workloads and preload designs "
        "(or `dse report RESULTS`, `dse rerun RESULTS`)",
        description="Compile and time every point of a study (a TOML or YAML spec: a base chip, "
        "a grid of HardwareSpec fields, workloads, preload designs), appending one row per "
        "point to a JSON-lines results file; points already in it are skipped, so an "
        "interrupted sweep resumes. `tvm-icca dse report RESULTS [--out DIR] [--format "
        "csv,parquet,md]` writes the tables (with the Pareto fronts), one plot per swept axis "
        "and the Pareto plots. `tvm-icca dse rerun RESULTS [--rows ...]` "
        "computes rows again from what they stored (chip, workload, design) and prints stored "
        "vs new; it exits 0 when all reproduce, 1 otherwise.",
    )
    parser.add_argument("spec", metavar="SPEC", help="the study's .toml/.yaml spec, or the word "
                        "'report' or 'rerun' followed by a results file")
    parser.add_argument("report_results", nargs="?", metavar="RESULTS",
                        help="with 'report' or 'rerun': the results file (.jsonl)")
    run = parser.add_argument_group("running a spec")
    run.add_argument("--dry-run", action="store_true",
                     help="list the points and which are done; compute nothing")
    run.add_argument("--jobs", "-j", type=positive_int, default=None,
                     help="locally, the CPUs to use (default: all available): one worker "
                     "process per plan group at most (points grouped by the workload and the "
                     "chip fields the plan search reads), each point's plan scans on the CPUs "
                     "left; the workers share a plan cache on disk (a temporary one without "
                     "--plan-cache) and never search one plan twice. On Ray: the tasks in "
                     "flight (default: the cluster's CPUs)")
    run.add_argument("--ray", metavar="auto|local|ADDRESS", default=None,
                     help="run the points as Ray tasks: 'auto' (this machine's cluster, see "
                     "`ray start`), a cluster address, or 'local' (start Ray here); needs "
                     "pip install 'tvm-icca[dse]'")
    run.add_argument("--results", metavar="PATH", default=None,
                     help="the results file (default: the spec's 'results', else "
                     "<spec stem>.jsonl beside the spec)")
    run.add_argument("--limit", type=positive_int, default=None,
                     help="compute at most N of the missing points in this run")
    run.add_argument("--plan-cache", metavar="DIR", nargs="?", const=True, default=None,
                     help="keep searched plans on disk in DIR (without DIR: $TVM_ICCA_PLAN_CACHE, "
                     "else $XDG_CACHE_HOME/tvm_icca/plan_search), read by every worker and later runs; "
                     "points differing only in HBM bandwidth, topology or host fields then reuse "
                     "every plan search")
    add_progress_argument(run)
    report = parser.add_argument_group("dse report")
    report.add_argument("--out", metavar="DIR", default=None,
                        help="directory of the report (default: <results stem>_report beside it)")
    report.add_argument("--no-plots", dest="plots", action="store_false",
                        help="write the tables only")
    report.add_argument("--format", dest="formats", metavar="csv|parquet|md", action="append",
                        default=None, type=_formats,
                        help="table formats besides the plots, comma-separated or repeated: md "
                        "(report.md, always written: what made each file, the Pareto fronts, "
                        "the points), csv (table.csv), parquet (table.parquet): every column "
                        "of every row and the derived ones (per token, Pareto); default md")
    again = parser.add_argument_group("dse rerun")
    again.add_argument("--rows", metavar="LIST", default=None,
                       help="rows to re-run: comma-separated 0-based indices (the file's order), "
                       "ranges 3-7, or key prefixes (8+ hex digits); default: all")
    again.add_argument("--sample", type=positive_int, default=None, metavar="N",
                       help="re-run N of the chosen rows, spread evenly through them")
    again.add_argument("--tolerance", type=float, default=None, metavar="REL",
                       help="relative difference under which a number reproduces (default 1e-9)")
    parser.set_defaults(func=_run)
    return parser


def _formats(text: str) -> list[str]:
    """``--format``'s value: comma-separated names of :data:`tvm_icca.dse.sweep_report.FORMATS`."""
    # pylint: disable=import-outside-toplevel
    from tvm_icca.dse.sweep_report import FORMATS

    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in FORMATS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown format {', '.join(unknown) or repr(text)}; "
                                         f"choose from {', '.join(FORMATS)}")
    return names


def _report_command(args: argparse.Namespace) -> str:
    """The ``dse report`` command as typed (for report.md: what made each file)."""
    # pylint: disable=import-outside-toplevel
    import shlex

    words = ["tvm-icca", "dse", "report", args.report_results]
    if args.out is not None:
        words += ["--out", args.out]
    if args.formats:
        words += ["--format", ",".join(f for group in args.formats for f in group)]
    if not args.plots:
        words.append("--no-plots")
    return shlex.join(words)


def _rerun(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    from tvm_icca.dse.rerun import DEFAULT_TOLERANCE, rerun

    if args.report_results is None:
        raise UsageError("dse rerun: give the results file (tvm-icca dse rerun RESULTS)")
    if not os.path.isfile(args.report_results):
        raise UsageError(f"dse rerun: no such file: '{args.report_results}'")
    tolerance = DEFAULT_TOLERANCE if args.tolerance is None else args.tolerance
    if not tolerance >= 0:
        raise UsageError(f"dse rerun: --tolerance must be a non-negative number, not {tolerance}")
    try:
        done = rerun(args.report_results, args.rows, sample=args.sample, tolerance=tolerance)
    except InvalidSpecError as err:
        raise UsageError(f"dse rerun: {err}") from None
    print(done.table())
    return 0 if done.agrees else 1


def _stopped(stopped) -> str:
    """One line: what a sweep a signal stopped keeps, and how to resume it."""
    # pylint: disable=import-outside-toplevel
    import signal

    from tvm_icca.dse.results import done_keys

    name = signal.Signals(stopped.signum).name
    summary = stopped.summary
    if summary is None:
        return f"dse stopped by {name} before computing anything; run the same command to start"
    keys = {p.key for p in summary.points}
    kept = len(keys & done_keys(summary.results))
    now = kept - len(keys & summary.done_before)
    return (f"dse stopped by {name}: {kept} of {len(keys)} points have rows in "
            f"{summary.results} ({now} computed in this run, every row whole); run the same "
            f"command again to compute the other {len(keys) - kept}")


def _run(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    rerun_only = ("--rows", "--sample", "--tolerance")
    given = [n for n, v in zip(rerun_only, (args.rows, args.sample, args.tolerance)) if v is not None]
    if args.spec == RERUN:
        return _rerun(args)
    if given:
        raise UsageError(f"dse: {', '.join(given)} belong to `tvm-icca dse rerun`")
    if args.spec == REPORT:
        if args.report_results is None:
            raise UsageError("dse report: give the results file (tvm-icca dse report RESULTS)")
        from tvm_icca.dse.sweep_report import write_report

        results = existing_file(args.report_results) if os.path.exists(args.report_results) else None
        if results is None:
            raise UsageError(f"dse report: no such file: '{args.report_results}'")
        formats = list(dict.fromkeys(f for group in (args.formats or [["md"]]) for f in group))
        for path in write_report(results, args.out, plots=args.plots, formats=formats,
                                 command=_report_command(args)):
            print(path)
        return 0
    if args.report_results is not None:
        raise UsageError(f"dse: unexpected argument '{args.report_results}' (a results file "
                         "goes after the word 'report': tvm-icca dse report RESULTS)")
    if args.out is not None or not args.plots or args.formats:
        raise UsageError("dse: --out, --format and --no-plots belong to `tvm-icca dse report`")
    from tvm_icca.dse.run import (ChipChangedWarning, OtherCommitsWarning, SweepInterrupted,
                                  describe_changes, run, stopping_signals)
    from tvm_icca.dse.spec import load_spec

    plan = None
    try:
        # from here on the first SIGINT or SIGTERM stops the sweep cleanly, a second at once
        with stopping_signals() as stop, warnings.catch_warnings():
            spec = load_spec(args.spec)
            # said here, before the sweep starts, instead of as a warning from inside it
            warnings.simplefilter("ignore", ChipChangedWarning)
            warnings.simplefilter("ignore", OtherCommitsWarning)
            plan = run(spec, dry_run=True, results=args.results)
            if plan.changed:
                print(f"tvm-icca: note: {describe_changes(plan.changed)}", file=sys.stderr,
                      flush=True)
            if plan.other_commits is not None:
                print(f"tvm-icca: note: {plan.other_commits}", file=sys.stderr, flush=True)
            stop.check()
            done = plan = plan if args.dry_run else run(
                spec, jobs=args.jobs, ray=args.ray, progress=args.progress, results=args.results,
                limit=args.limit, plan_cache=args.plan_cache)
            stop.check()
    except SweepInterrupted as stopped:
        if stopped.summary is None:  # after the sweep's run (or its dry run) returned
            stopped.summary = plan
        print(f"tvm-icca: {_stopped(stopped)}", file=sys.stderr, flush=True)
        return stopped.exit_status
    if args.dry_run:
        changed = {c.point.key for c in done.changed}
        for point in done.points:
            mark = ("done" if point.key in done.done_before else
                    "redo" if point.key in changed else "todo")
            print(f"{point.index:>5}  {mark}  {point.key[:12]}  {point.label()}")
    print(done.describe())
    return 0
