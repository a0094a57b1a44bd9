"""The points of a design-space exploration, each with a stable key, in a cache-friendly order.

A point is one chip (the base chip with its overrides), one workload instance and one preload
design. Its :attr:`DsePoint.key` is the SHA-256 of the canonical JSON of everything that
determines its result: the whole chip (every field of the resolved :class:`HardwareSpec`, so
the spec's fixed fields and base chip are in it), the workload and its arguments, the design,
where the state lives and the execution model. The same point in a later run (or another spec)
has the same key, which is how a results file knows what is done.

Two more digests make a row traceable (issue 38): :func:`chip_digest` names the resolved chip
(its whole spec is stored once beside the results, :mod:`tvm_icca.dse.results`), and
:attr:`DsePoint.point_id` names the point within its study whatever its chip resolves to (the
spec's name, the point's own chip overrides, the workload, the design, state and execution): a
resumed sweep whose preset or fixed fields changed finds the rows of the same points computed
on the old chip and says what changed (:func:`chip_changes`).

The order groups points that share a workload and the part of the chip the plan search reads
(:func:`plan_group`: the fields of :func:`tvm_icca.plan_search.hw_fields.search_key`, so points
differing in HBM bandwidth, topology or host fields are one group, points differing in cores,
SRAM or link bandwidth are not): the first point of a group searches its operators' plans, and
every other point of the group finds them in the plan cache. A parallel sweep runs a group's
first point alone before its other points (:mod:`tvm_icca.dse.run`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from tvm_icca.dse.gpu_points import GPU_DESIGN, gpu_document
from tvm_icca.dse.spec import DseSpec, field_json
from tvm_icca.hardware_choice import HardwareSpec
from tvm_icca.plan_search.hw_fields import search_key

__all__ = ["DsePoint", "KEY_FORMAT", "chip_changes", "chip_digest", "chip_document", "expand",
           "plan_group", "point_id", "point_key"]

#: Part of every key: a change of what a key covers changes every key.
KEY_FORMAT = 1


@dataclass(frozen=True)
class DsePoint:
    """One point of a study: a chip, a workload instance and a design.

    Parameters
    ----------
    index : int
        Its place in the study's order (:func:`expand`).
    hardware : dict
        The chip overrides of this point (the spec's grid and points fields).
    workload : dict
        ``workload`` (zoo name or ONNX path) and its arguments.
    design : str
        The preload design.
    state : str or None
        Where weights and KV caches live (``None``: decided by the compiler).
    execution : str
        ``"t10"`` or ``"vgm"``.
    hw : HardwareSpec
        The resolved chip.
    group : str
        Points of one group share a workload, state, execution model and the chip fields the
        plan search reads (:func:`plan_group`): they ask for the same operator plans.
    key : str
        SHA-256 hex digest of the point's inputs (:func:`point_key`).
    point_id : str
        SHA-256 hex digest of the point's place in its study (:func:`point_id`).
    gpu : str
        A GPU reference point's GPU preset (``hw`` is then the chip that partitions the
        model, :mod:`tvm_icca.dse.gpu_points`); empty for an ICCA point.
    """

    index: int
    hardware: dict[str, Any]
    workload: dict[str, Any]
    design: str
    state: str | None
    execution: str
    hw: HardwareSpec = field(repr=False, compare=False)
    group: str = field(default="", repr=False)
    key: str = ""
    point_id: str = field(default="", repr=False)
    gpu: str = ""

    def inputs(self, spec: DseSpec) -> dict[str, Any]:
        """The flat inputs of a results row: the base chip, its fixed and swept fields, the
        workload and its arguments, the design, the state and the execution model.

        Every field the grid or any explicit point sets is a column of every row, with this
        point's value (the base chip's where this point does not set it): an explicit point
        that changes one field still has the grid's other columns, so tables and plots place
        it on every axis. A GPU point's chip columns are None.
        """
        swept = dict.fromkeys([*spec.grid, *(name for p in spec.points for name in p)])
        # a GPU point has none of the ICCA chip's fields (its model was only partitioned for
        # the base chip): None, so that no table or plot reads an H100 as a 4-chip system
        chip = ({name: None for name in [*spec.fixed, *swept]} if self.gpu else
                {**spec.fixed, **{name: field_json(self.hw, name) for name in swept}})
        return {
            "spec": spec.name,
            "hardware": self.gpu or self.hw.name,
            **chip,
            **self.workload,
            "design": self.design,
            "state": self.state or "auto",
            "execution": self.execution,
        }

    def label(self) -> str:
        """A short description for listings and progress."""
        args = ", ".join(f"{k}={v}" for k, v in self.workload.items() if k != "workload")
        chip = ", ".join(f"{k}={_short(v)}" for k, v in self.hardware.items())
        return (f"{self.workload['workload']}{f'({args})' if args else ''} on "
                f"{self.gpu or self.hw.name}{f' [{chip}]' if chip else ''} {self.design}")


def _digest(doc: Any) -> str:
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


#: HardwareSpec fields that describe a chip without defining it (its ``notes``, and the fields
#: the dataclass leaves out of its equality, e.g. why a value is assumed): no part of a key.
_DESCRIPTIVE = frozenset({"notes"} | {f.name for f in dataclasses.fields(HardwareSpec)
                                      if not f.compare})


def chip_document(hw: "HardwareSpec | dict[str, Any]") -> dict[str, Any]:
    """What of a chip determines results: every field but the descriptive ones (``notes``)."""
    chip = dict(hw) if isinstance(hw, dict) else hw.to_dict()
    for name in _DESCRIPTIVE:
        chip.pop(name, None)
    return chip


def chip_digest(hw: "HardwareSpec | dict[str, Any]") -> str:
    """SHA-256 hex digest of a resolved chip (:func:`chip_document`, canonical JSON)."""
    return _digest(chip_document(hw))


def point_key(hw: HardwareSpec, workload: dict[str, Any], design: str, state: str | None,
              execution: str, gpu: str = "") -> str:
    """The stable key of a point: SHA-256 of the canonical JSON of its inputs (the whole chip
    without its descriptive fields, :func:`chip_document`; the workload, the design, the
    state, the execution; for a GPU point the GPU's fields too,
    :func:`tvm_icca.dse.gpu_points.gpu_document`)."""
    doc = {"format": KEY_FORMAT, "hardware": chip_document(hw), "workload": workload,
           "design": design, "state": state or "auto", "execution": execution}
    if gpu:
        doc["gpu"] = gpu_document(gpu)
    return _digest(doc)


def plan_group(hw: HardwareSpec, workload: dict[str, Any], state: str | None,
               execution: str) -> str:
    """The group of points that ask for the same operator plans: a digest of the workload, the
    state, the execution model and the chip as far as the plan search reads it
    (:func:`tvm_icca.plan_search.hw_fields.search_key`, the one declaration of those fields).

    The preload design is not part of it: the designs of one chip plan the same operators
    (they differ in the budgets of a few), so the first point of a group searches most of what
    the others need. HBM and inter-chip bandwidths are not either: on several chips they only
    pick among a plan's searched placements (:func:`tvm_icca.plan_search.hw_fields.placement_rates`),
    which costs no search."""
    return _digest({"workload": workload, "state": state or "auto", "execution": execution,
                    "chip": search_key(hw)})[:16]


def point_id(spec_name: str, overrides: dict[str, Any], workload: dict[str, Any], design: str,
             state: str | None, execution: str) -> str:
    """The point's place in its study: SHA-256 of the spec's name, the point's chip overrides
    (its grid values or explicit point, not the chip they resolve to), the workload, the
    design, the state and the execution. Unchanged when a preset or the spec's fixed fields
    change; two rows of one ``point_id`` and different keys were computed on different chips."""
    return _digest({"spec": spec_name, "overrides": overrides, "workload": workload,
                    "design": design, "state": state or "auto", "execution": execution})


def chip_changes(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """The fields two chips (:meth:`HardwareSpec.to_dict` mappings) differ in, as
    ``"num_cores 80 -> 72"`` (``"(absent)"`` for a field one of them lacks), ``notes`` left
    out; ``old`` None (not recorded): one entry saying so."""
    if old is None:
        return ["the earlier chip was not recorded (a row written before rows stored their chip)"]
    # through JSON: a stored chip holds lists where a live one holds tuples
    old, new = (json.loads(json.dumps(chip_document(c), default=str)) for c in (old, new))
    out = []
    for name in [*old, *(n for n in new if n not in old)]:
        a, b = old.get(name, _ABSENT), new.get(name, _ABSENT)
        if a != b:
            out.append(f"{name} {_shown(a)} -> {_shown(b)}")
    return out


_ABSENT = object()


def _shown(value: Any) -> str:
    if value is _ABSENT:
        return "(absent)"
    return _short(value) if not isinstance(value, str) else repr(value)


def expand(spec: DseSpec) -> list[DsePoint]:
    """Every point of ``spec``, in the order a sweep runs them.

    Parameters
    ----------
    spec : DseSpec
        The study.

    Returns
    -------
    list of DsePoint
        Workloads in spec order; within a workload, chips grouped by the fields the plan
        search reads (:func:`plan_group`; groups in the order they first appear), then the
        chips of the grid's product and the explicit points in spec order, designs innermost;
        then one point per GPU of ``spec.gpus`` (compiled for the base chip).
        Deterministic: the same spec gives the same list.
    """
    chips = []
    for overrides in spec.hardware_points():
        hw = spec.hardware.with_overrides(**overrides) if overrides else spec.hardware
        chips.append((overrides, hw, json.dumps(search_key(hw), default=str)))
    group_rank: dict[str, int] = {}
    for _, _, shape in chips:
        group_rank.setdefault(shape, len(group_rank))
    order = sorted(range(len(chips)), key=lambda i: (group_rank[chips[i][2]], i))
    points: list[DsePoint] = []
    for workload in spec.workloads:
        for c in order:
            overrides, hw, _ = chips[c]
            group = plan_group(hw, workload, spec.state, spec.execution)
            for design in spec.designs:
                points.append(DsePoint(
                    index=len(points), hardware=dict(overrides), workload=dict(workload),
                    design=design, state=spec.state, execution=spec.execution, hw=hw,
                    group=group, key=point_key(hw, workload, design, spec.state, spec.execution),
                    point_id=point_id(spec.name, overrides, workload, design, spec.state,
                                      spec.execution)))
        for gpu in spec.gpus:  # after the workload's chips: one GPU point each
            hw = spec.hardware
            points.append(DsePoint(
                index=len(points), hardware={}, workload=dict(workload), design=GPU_DESIGN,
                state=spec.state, execution=spec.execution, hw=hw,
                group=plan_group(hw, workload, spec.state, spec.execution),
                key=point_key(hw, workload, GPU_DESIGN, spec.state, spec.execution, gpu),
                point_id=point_id(spec.name, {"gpu": gpu}, workload, GPU_DESIGN, spec.state,
                                  spec.execution), gpu=gpu))
    return points


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
