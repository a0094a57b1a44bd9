"""Lower bounds of every plan of an F_op row: partition bytes, sub-tensor bytes, memory.

The exact searches (:mod:`.search`, :mod:`.pareto`) prune with them, so they must never
exceed what a real plan of the row needs.
"""

from __future__ import annotations

import numpy as np

from .intmath import INT, ceil_div
from .partitions import sharing_counts
from .structure import PlanStructure


def memory_lower_bound(structure: PlanStructure, F: np.ndarray) -> np.ndarray:
    """A lower bound of the bytes per core of every plan with these F_op rows."""
    return partition_lower_bounds(structure, F).sum(axis=1)


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
    for t, spec in enumerate(structure.dims):
        rotating = np.ones(len(F), INT)
        fixed = np.ones(len(F), INT)
        for d in spec:
            if d[0] == "whole":
                fixed = fixed * d[1]
            elif d[0] == "simple":
                if structure.rotatable[t, d[1]]:
                    rotating = rotating * c[:, d[1]]
                else:
                    fixed = fixed * c[:, d[1]]
            elif d[0] == "compound":
                length = np.ones(len(F), INT)
                for a, coef in d[1]:
                    length = length + coef * (c[:, a] - 1)
                fixed = fixed * length
        whole[:, t] = fixed * rotating * structure.elem_bytes[t]
        split[:, t] = fixed * np.maximum(rotating / P[:, t], 1.0) * structure.elem_bytes[t]
    return whole, split


def step_partition_lower_bounds(structure: PlanStructure, F: np.ndarray, S: np.ndarray,
                                xp: np.ndarray) -> np.ndarray:
    """Per tensor, a lower bound of its partition bytes over every plan with F_op rows ``F``,
    steps ``S`` and padded extents ``xp`` (all (n, A)), (n, T).

    The partition is the padded sub-tensor divided, along the tensor's rotatable dimensions,
    by its temporal factors; each factor divides that axis's steps and their product divides
    ``P_T`` (the rules of :mod:`.partitions`), so the division is at most
    ``min(P_T, prod S)`` over those dimensions.
    """
    P = sharing_counts(structure, F)
    out = np.zeros((len(F), structure.num_tensors))
    for t, spec in enumerate(structure.dims):
        rotating = np.ones(len(F), INT)
        split = np.ones(len(F), INT)
        fixed = np.ones(len(F), INT)
        for d in spec:
            if d[0] == "whole":
                fixed = fixed * d[1]
            elif d[0] == "simple":
                if structure.rotatable[t, d[1]]:
                    rotating = rotating * xp[:, d[1]]
                    split = split * S[:, d[1]]
                else:
                    fixed = fixed * xp[:, d[1]]
            elif d[0] == "compound":
                length = np.ones(len(F), INT)
                for a, coef in d[1]:
                    length = length + coef * (xp[:, a] - 1)
                fixed = fixed * length
        out[:, t] = fixed * (rotating / np.minimum(split, P[:, t])) * structure.elem_bytes[t]
    return out
