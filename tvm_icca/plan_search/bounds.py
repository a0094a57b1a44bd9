"""Lower bounds of every plan of an F_op row: partition bytes, sub-tensor bytes, memory.

The exact searches (:mod:`.search`, :mod:`.pareto`) prune with them, so they must never
exceed what a real plan of the row needs.
"""

from __future__ import annotations

import numpy as np

from tvm_icca.plan_search.intmath import INT, ceil_div
from tvm_icca.plan_search.plan_space import sharing_counts
from tvm_icca.plan_search.structure import PlanStructure


def memory_lower_bound(structure: PlanStructure, F: np.ndarray) -> np.ndarray:
    """A lower bound of the bytes per core of every plan with these F_op rows: its
    partitions', and an attention operator's state beside an output partition of at least
    the unpadded sub-operator's rows (``xp >= ceil(E / F)``; they never rotate)."""
    c = ceil_div(structure.extents[None, :], F)
    return partition_lower_bounds(structure, F).sum(axis=1) + structure.state_bytes(c)


def partition_lower_bounds(structure: PlanStructure, F: np.ndarray) -> np.ndarray:
    """Per tensor, a lower bound of its partition bytes over every plan of each F_op row, (N, T).

    Each partition is at least its sub-tensor (``xp >= ceil(E/F)`` on every axis) split at
    most ``P_T`` ways along its rotatable dimensions (``prod f_t`` divides ``P_T``), and a
    simple dimension keeps at least one element.
    """
    return _partition_bounds(structure, F)[1]


def subtensor_lower_bounds(structure: PlanStructure, F: np.ndarray) -> np.ndarray:
    """Per tensor, a lower bound of its whole sub-tensor's bytes (its unrotated partition), (N, T)."""
    return _partition_bounds(structure, F)[0]


def _partition_bounds(structure: PlanStructure, F: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    c = ceil_div(structure.extents[None, :], F)
    P = sharing_counts(structure, F)
    whole = np.zeros((len(F), structure.num_tensors))
    split = np.zeros((len(F), structure.num_tensors))
    for t in range(structure.num_tensors):
        fixed, rotating, _ = _partition_factors(structure, t, c)
        whole[:, t] = fixed * rotating * structure.elem_bytes[t]
        split[:, t] = fixed * np.maximum(rotating / P[:, t], 1.0) * structure.elem_bytes[t]
    return whole, split


def _partition_factors(structure: PlanStructure, t: int,
                       lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Tensor ``t``'s sub-tensor elements with per-axis sub-operator ``lengths`` (n, A), as
    (the part that never rotates, the part along its rotatable dimensions, those axes);
    the layout's dimension rules (``OpLayout._dim_length``)."""
    n = len(lengths)
    rotating = np.ones(n, INT)
    fixed = np.ones(n, INT)
    axes = []
    for d in structure.dims[t]:
        if d[0] == "whole":
            fixed = fixed * d[1]
        elif d[0] == "simple":
            if structure.rotatable[t, d[1]]:
                rotating = rotating * lengths[:, d[1]]
                axes.append(d[1])
            else:
                fixed = fixed * lengths[:, d[1]]
        elif d[0] == "compound":
            length = np.ones(n, INT)
            for a, coef in d[1]:
                length = length + coef * (lengths[:, a] - 1)
            fixed = fixed * length
    return fixed, rotating, axes


def step_partition_lower_bounds(structure: PlanStructure, F: np.ndarray, S: np.ndarray,
                                xp: np.ndarray) -> np.ndarray:
    """Per tensor, a lower bound of its partition bytes over every plan with F_op rows ``F``,
    steps ``S`` and padded extents ``xp`` (all (n, A)), (n, T).

    The partition is the padded sub-tensor divided, along the tensor's rotatable dimensions,
    by its temporal factors; each factor divides that axis's steps and their product divides
    ``P_T`` (the rules of :mod:`.plan_space`), so the division is at most
    ``min(P_T, prod S)`` over those dimensions.
    """
    P = sharing_counts(structure, F)
    out = np.zeros((len(F), structure.num_tensors))
    for t in range(structure.num_tensors):
        fixed, rotating, axes = _partition_factors(structure, t, xp)
        split = np.prod(S[:, axes], axis=1) if axes else np.ones(len(F), INT)
        out[:, t] = fixed * (rotating / np.minimum(split, P[:, t])) * structure.elem_bytes[t]
    return out
