"""Design-space exploration: time many chips, workloads and preload designs in one sweep.

A *study* (a TOML or YAML spec, :func:`load_spec`) names a base chip, a grid of
:class:`~tvm_icca.HardwareSpec` fields to sweep (and explicit points), workloads of the zoo or
ONNX files with their sizes, and Elk preload designs. :func:`run` compiles every point with
the model-level compiler (:func:`tvm_icca.compile_programs`), times it with the timing
simulator, and appends one row per point to a JSON-lines results file; a sweep that is
interrupted resumes where it stopped. ``tvm-icca dse SPEC`` is the command line, ``tvm-icca
dse report RESULTS`` makes its tables and plots (:func:`write_report`), ``tvm-icca dse rerun
RESULTS`` computes rows again from what they recorded and compares (:func:`rerun`). Every row
says where it came from: its chip (stored once beside the results, :func:`read_chips`), the
code's commit, its wall and CPU time (:mod:`tvm_icca.provenance`).

Example::

    import tvm_icca.dse

    done = tvm_icca.dse.run("hbm-sweep.toml", jobs=2)     # or ray="auto" on a Ray cluster
    print(done.describe())
    rows = tvm_icca.dse.read_rows(done.results)

Modules: :mod:`~tvm_icca.dse.spec` (the spec), :mod:`~tvm_icca.dse.points` (points and keys),
:mod:`~tvm_icca.dse.results` (the results file), :mod:`~tvm_icca.dse.worker` (one point),
:mod:`~tvm_icca.dse.run` (the sweep), :mod:`~tvm_icca.dse.local_pool` (its local workers),
:mod:`~tvm_icca.dse.stopping` (SIGINT and SIGTERM), :mod:`~tvm_icca.dse.sweep_report` (tables and plots),
:mod:`~tvm_icca.dse.report_plots` (the plots), :mod:`~tvm_icca.dse.columns` (per-token columns, cost
proxies), :mod:`~tvm_icca.dse.pareto` (Pareto fronts),
:mod:`~tvm_icca.dse.rerun` (re-running rows).
"""

from tvm_icca.dse.points import DsePoint, expand
from tvm_icca.dse.sweep_report import write_report
from tvm_icca.dse.rerun import RerunResult, rerun
from tvm_icca.dse.results import append_row, done_keys, read_chips, read_rows, read_runs
from tvm_icca.dse.run import ChipChangedWarning, DseRun, run
from tvm_icca.dse.stopping import SweepInterrupted, stopping_signals
from tvm_icca.dse.spec import DseSpec, load_spec

__all__ = ["ChipChangedWarning", "DsePoint", "DseRun", "DseSpec", "RerunResult", "SweepInterrupted",
           "append_row", "done_keys", "expand", "load_spec", "read_chips", "read_rows", "read_runs",
           "rerun", "run", "stopping_signals", "write_report"]
