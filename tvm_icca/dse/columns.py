"""Columns derived from a results row: per-token metrics, the system's cost proxies, Pareto fronts.

A row's ``total_s`` and ``energy_j`` are per run: one decode step of 32 sequences, one
prefill of a 2,048-token prompt, one ResNet batch. An architect compares designs per token
(per sample for the models that have no tokens): :func:`per_token` divides by
:func:`tvm_icca.workloads.tokens_per_run`, the one rule for every workload. A new row carries
the columns (:func:`tvm_icca.dse.worker.evaluate` adds them); for rows written before, the
report computes them on read from the workload and its arguments.

:func:`derived_rows` (and :func:`results_frame`, the same as a :class:`pandas.DataFrame`) is
the table of a results file: every column of the rows, the per-token columns, the cost
proxies of each chip (its SRAM and HBM capacity over the whole system, its cores) and, per
workload instance, whether the point is on the Pareto front of time per token against energy
per token (``pareto``) and against the system's SRAM (``pareto_sram``)
(:func:`tvm_icca.dse.pareto.pareto_front`). The report writes it as Markdown, CSV or Parquet
(:func:`tvm_icca.dse.sweep_report.write_report`).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from runtime_sim.contract.errors import IccaError
from runtime_sim.contract.gpu import gpu_preset, is_gpu_preset
from tvm_icca.dse.gpu_points import GPU_DESIGN
from tvm_icca.dse.pareto import pareto_front
from tvm_icca.dse.spec import hardware_fields

if TYPE_CHECKING:  # pragma: no cover
    import pandas

__all__ = ["COST_COLUMNS", "PARETO_COLUMNS", "PER_TOKEN_COLUMNS", "POINT_COLUMNS", "chip_value",
           "derived_rows", "instance_key", "is_number", "per_token", "results_frame", "row_workload"]

#: Input columns of a row that are neither chip fields nor workload arguments.
POINT_COLUMNS = frozenset({"spec", "hardware", "workload", "design", "state", "execution"})
#: The per-token columns (:data:`runtime_sim.contract.metrics.DSE_METRICS`).
PER_TOKEN_COLUMNS = ("tokens_per_run", "time_per_token_s", "energy_per_token_j")
#: Cost proxies of a chip, column -> the chip fields multiplied (whole system; glossary).
COST_COLUMNS: dict[str, tuple[str, ...]] = {
    "system_sram_bytes": ("sram_bytes_per_core", "num_cores"),
    "system_hbm_bytes": ("hbm_bytes_per_chip", "num_chips"),
}
#: Pareto columns -> the objective set against time per token (both minimised).
PARETO_COLUMNS = {"pareto": "energy_per_token_j", "pareto_sram": "system_sram_bytes"}


def is_number(value: Any) -> bool:
    """A finite int or float (not a bool, not None)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def row_workload(row: Mapping[str, Any]) -> dict[str, Any]:
    """The workload and its arguments a row recorded: ``workload`` and ``workload_args``, or for
    a row written before rows stored them, its input columns that are no chip field."""
    if isinstance(row.get("workload_args"), dict):
        return {"workload": row.get("workload"), **row["workload_args"]}
    chip = set(hardware_fields())
    return {"workload": row.get("workload"),
            **{k: row.get(k) for k in row.get("inputs", ()) if k not in chip
               and k not in POINT_COLUMNS}}


def instance_key(row: Mapping[str, Any]) -> str:
    """One workload instance (the workload and its arguments) as a canonical string: the unit
    within which per-token numbers compare (a front never mixes two workloads)."""
    return json.dumps(row_workload(row), sort_keys=True, default=str)


def _tokens(row: Mapping[str, Any]) -> int | None:
    # pylint: disable=import-outside-toplevel
    from tvm_icca.workloads import tokens_per_run

    if is_number(row.get("tokens_per_run")) and row["tokens_per_run"] > 0:
        return int(row["tokens_per_run"])
    workload = row_workload(row)
    name = workload.pop("workload", None)
    if not isinstance(name, str) or name.lower().endswith(".onnx"):
        return None  # an ONNX file names no batch: its rows stay per run
    try:
        return tokens_per_run(name, workload)
    except IccaError:
        return None  # a workload the zoo does not know (now): no per-token columns


def per_token(row: Mapping[str, Any]) -> dict[str, Any]:
    """The per-token columns of a row that it can have (none it cannot).

    Parameters
    ----------
    row : mapping
        A results row (:func:`tvm_icca.dse.read_rows`) or the timing columns of one.

    Returns
    -------
    dict
        ``tokens_per_run`` (:func:`tvm_icca.workloads.tokens_per_run` of the row's zoo
        workload; absent for an ONNX file), ``time_per_token_s`` (``total_s`` / tokens, where
        the row has a time) and ``energy_per_token_j`` (``energy_j`` / tokens, only where the
        row has an energy: a chip without an energy model has none, and none is invented).
    """
    tokens = _tokens(row)
    if tokens is None:
        return {}
    out: dict[str, Any] = {"tokens_per_run": tokens}
    if is_number(row.get("total_s")):
        out["time_per_token_s"] = row["total_s"] / tokens
    if is_number(row.get("energy_j")):
        out["energy_per_token_j"] = row["energy_j"] / tokens
    return out


def chip_value(row: Mapping[str, Any], chips: Mapping[str, Mapping[str, Any]], name: str) -> Any:
    """A chip field of a row's point: the row's column if it has one (a fixed or swept field),
    else the row's chip in the provenance file (:func:`tvm_icca.dse.read_chips`), else None."""
    if name in row:
        return row[name]
    return chips.get(str(row.get("chip_digest")), {}).get(name)


def _cost(row: Mapping[str, Any], chips: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    if row.get("design") == GPU_DESIGN and is_gpu_preset(str(row.get("hardware"))):
        # a GPU point's chip_digest is the chip its model was partitioned for: its cost is
        # the GPU's own (SMs, the L2 all SMs share, its HBM; the SMs' shared memory and
        # register files are not in the GPU description and not counted)
        gpu = gpu_preset(str(row["hardware"]))
        return {"num_cores": gpu.sms, "system_sram_bytes": gpu.l2_bytes,
                "system_hbm_bytes": gpu.hbm_bytes}
    out: dict[str, Any] = {"num_cores": chip_value(row, chips, "num_cores")}
    for column, factors in COST_COLUMNS.items():
        values = [chip_value(row, chips, f) for f in factors]
        out[column] = math.prod(values) if all(is_number(v) for v in values) else None
    if out["system_hbm_bytes"] == 0:
        out["system_hbm_bytes"] = None  # 0: capacity not modelled (HardwareSpec), not none
    return out


def _cell(value: Any) -> Any:
    """A value a table column holds: mappings and lists as canonical JSON text."""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, default=str)
    return value


def derived_rows(rows: Sequence[Mapping[str, Any]],
                 chips: Mapping[str, Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The rows with the derived columns added (values as the rows hold them).

    Parameters
    ----------
    rows : sequence of mapping
        Rows of :func:`tvm_icca.dse.read_rows`.
    chips : mapping, optional
        :func:`tvm_icca.dse.read_chips` of the results file (where the cost proxies find the
        fields a spec neither fixed nor swept).

    Returns
    -------
    list of dict
        Each row with the columns of :func:`per_token`, ``num_cores`` and
        :data:`COST_COLUMNS` (None where the chip does not say), ``workload_instance``
        (:func:`instance_key`) and the booleans of :data:`PARETO_COLUMNS`: on the front of time
        per token against that objective among the ``ok`` rows of the same workload instance
        (False where either value is missing).
    """
    chips = chips or {}
    out = []
    for row in rows:
        record = dict(row)
        record.update(per_token(row))
        for column in PER_TOKEN_COLUMNS:
            record.setdefault(column, None)
        record.update(_cost(row, chips))
        record["workload_instance"] = instance_key(row)
        out.append(record)
    for column, objective in PARETO_COLUMNS.items():
        for record in out:
            record[column] = False
        instances: dict[str, list[dict[str, Any]]] = {}
        for record in out:
            if record.get("status") == "ok":
                instances.setdefault(record["workload_instance"], []).append(record)
        for here in instances.values():
            marks = pareto_front([_number_or_none(r["time_per_token_s"]) for r in here],
                                 [_number_or_none(r[objective]) for r in here])
            for record, mark in zip(here, marks):
                record[column] = mark
    return out


def results_frame(rows: Sequence[Mapping[str, Any]],
                  chips: Mapping[str, Mapping[str, Any]] | None = None) -> "pandas.DataFrame":
    """The table of a results file as a :class:`pandas.DataFrame`: :func:`derived_rows`, one
    line per row, mappings and lists as JSON text (what CSV and Parquet files hold).

    Raises
    ------
    IccaError
        pandas is not installed (``pip install 'tvm-icca[dse]'``).
    """
    try:
        import pandas as pd  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise IccaError("the report's tables need pandas: pip install 'tvm-icca[dse]'") from None
    return pd.DataFrame.from_records([{k: _cell(v) for k, v in r.items()}
                                      for r in derived_rows(rows, chips)])


def _number_or_none(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
