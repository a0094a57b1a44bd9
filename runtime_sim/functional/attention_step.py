"""The fused attention operator on the cores: the online-softmax recurrence.

An attention operator (kind ``"attention"``, :class:`runtime_sim.contract.expr.TensorExpr`)
computes ``softmax_j(score) @ value`` without its scores ever leaving a core. Each core keeps,
beside its output partition ``o`` (float32, as every accumulator), a running max ``m`` and a
running sum ``l`` per row (:func:`runtime_sim.contract.plan_rules.attention_state_bytes`), and
every compute step over a block of keys runs the online softmax (Milakov & Gimelshein 2018,
"Online normalizer calculation for softmax"; FlashAttention, Dao et al. 2022, Algorithm 1):

    s = score(block),  m' = max(m, max_j s),  p = exp(s - m'),
    l = l exp(m - m') + sum_j p,  o = o exp(m - m') + p @ value,  m = m'

Keys past the end of the axis (padding of the plan) score ``-inf`` and add nothing. Output
replicas (the key axis split across cores) are combined exactly into ring 0 with
``M = max_r m_r``, ``o = sum_r exp(m_r - M) o_r``, ``l = sum_r exp(m_r - M) l_r``, and the
output is ``o / l`` (then the epilogue). A row whose keys so far all scored ``-inf`` keeps
``m = -inf``, ``l = 0``, ``o = 0``: its exponentials are taken against 0, not ``-inf``, so no
NaN enters a state that a later key or replica may still fill; a row that stays empty ends as
``0 / 0``, NaN, as the unfused softmax of an all ``-inf`` row.

The state lives in the operator's axis space, ``[cores, *xp over the top-level axes]`` with
size 1 on the features and the key axis: a plan never rotates rows or features
(:func:`runtime_sim.contract.plan_rules.fixed_axes`), so a core's chunk of them is its whole
sub-operator at every step.
"""

from __future__ import annotations

import numpy as np

from runtime_sim.contract.errors import DeviceProgramError, short_name
from runtime_sim.contract.expr import AffineIndex, attention_roles
from runtime_sim.contract.layout import OpLayout
from runtime_sim.functional.expr_eval import COMPUTE_DTYPE, ExprEvaluator

#: The online-softmax state of one attention operator on its cores: (running max, running sum).
State = tuple[np.ndarray, np.ndarray]


def initial_state(layout: OpLayout) -> State:
    """``m = -inf`` and ``l = 0`` for every row of every core's output partition."""
    rows = set(attention_roles(layout.expr).rows)
    shape = [layout.num_cores] + [layout.xp[a] if a in rows else 1 for a in layout.axes]
    return np.full(shape, -np.inf, COMPUTE_DTYPE), np.zeros(shape, COMPUTE_DTYPE)


def output_positions(layout: OpLayout, q: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Where each point of a core's chunk ``q`` (over the top-level axes) sits in its own
    output partition, per output dimension: the index of ``buffer[core, *positions]``."""
    expr = layout.expr
    top = layout.axes
    out = len(expr.tensors) - 1
    start = layout.partition_start(out, layout.partition(out, q))
    return [layout.chunk_index(ix, q, top) - np.asarray(start[d]).reshape([-1] + [1] * len(top))
            for d, ix in enumerate(expr.output.indices)]


def online_update(ev: ExprEvaluator, expr_body: dict, key: str, keep: np.ndarray | None,
                  m: np.ndarray, l: np.ndarray, o: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The online-softmax update over one block of keys, for every core (or VGM tile) at
    once: ``(m, l, o)`` after the block. Every array is in ``ev``'s layout (``[cores,
    *axes]``, size 1 on the key axis and wherever it does not vary); ``keep`` (or ``None``)
    marks the keys inside the axis, the others score ``-inf``. ``expr_body`` is the
    ``attention`` node, ``key`` the key axis."""
    score_node, value_node = expr_body["args"]
    key_dim = ev.axis_order.index(key) + 1
    with np.errstate(all="ignore"):
        s = np.asarray(ev.evaluate(score_node), COMPUTE_DTYPE)
        if keep is not None:
            s = np.where(keep, s, COMPUTE_DTYPE(-np.inf))
        m_new = np.maximum(m, np.max(s, axis=key_dim, keepdims=True))
        # a row with no key so far keeps m = -inf: exponentials against 0 give 0, not NaN
        base = np.where(np.isneginf(m_new), COMPUTE_DTYPE(0), m_new)
        p = np.exp(s - base, dtype=COMPUTE_DTYPE)
        alpha = np.exp(m - base, dtype=COMPUTE_DTYPE)
        l_new = l * alpha + np.sum(p, axis=key_dim, keepdims=True, dtype=COMPUTE_DTYPE)
        o_new = o * alpha + ev.contract([p, ev.evaluate(value_node)], [key])
    return m_new, l_new, o_new


def step(op_name: str, layout: OpLayout, ev: ExprEvaluator, q: dict[str, np.ndarray],
         output: np.ndarray, state: State) -> State:
    """One compute step of every core over its block of keys: updates ``output`` (the
    output buffer, ``[cores, *partition]``, float32) in place and returns the new state.

    ``ev`` evaluates over the top-level axes then the core-local ones, at chunk ``q``.
    """
    expr = layout.expr
    key = attention_roles(expr).key
    n_top, n_local = len(layout.axes), len(expr.local_axes)
    pad = (1,) * n_local
    keys = layout.chunk_index(AffineIndex.of_axis(key), q, ev.axis_order)
    locs = output_positions(layout, q)
    core = np.arange(layout.num_cores).reshape([-1] + [1] * n_top)
    o = output[(core, *locs)]
    m, l, o_new = online_update(ev, expr.body, key, keys < layout.extent[key],
                                *(x.reshape(x.shape + pad) for x in (*state, o)))
    if any(n != 1 for n in o_new.shape[1 + n_top:]):
        raise DeviceProgramError(f"operator '{short_name(op_name)}': the attention value reads a "
                                 "core-local axis")
    output[(core, *locs)] = np.broadcast_to(o_new.reshape(o_new.shape[: 1 + n_top]), o.shape)
    return (np.broadcast_to(m.reshape(m.shape[: 1 + n_top]), state[0].shape).astype(COMPUTE_DTYPE),
            np.broadcast_to(l.reshape(l.shape[: 1 + n_top]), state[1].shape).astype(COMPUTE_DTYPE))


def combine_replicas(layout: OpLayout, output: np.ndarray, state: State) -> tuple[np.ndarray, State]:
    """The output replicas of every partition combined exactly into its ring-0 owner
    (``M = max m_r``, ``o = sum exp(m_r - M) o_r``, ``l = sum exp(m_r - M) l_r``); the other
    cores' buffers and state are emptied (they sent them away)."""
    m, l = state
    owner_of = layout.output_owner_of()
    order = np.argsort(owner_of, kind="stable")
    sorted_owner = owner_of[order]
    heads = np.flatnonzero(np.r_[True, sorted_owner[1:] != sorted_owner[:-1]])
    group = np.empty(layout.num_cores, np.int64)
    group[order] = np.repeat(np.arange(heads.size), np.diff(np.r_[heads, order.size]))
    locs = output_positions(layout, layout.chunk({}))
    n_top = len(layout.axes)
    core = np.arange(layout.num_cores).reshape([-1] + [1] * n_top)
    o = output[(core, *locs)]
    with np.errstate(all="ignore"):
        top = np.maximum.reduceat(m[order], heads, axis=0)[group]
        scale = np.exp(m - np.where(np.isneginf(top), COMPUTE_DTYPE(0), top), dtype=COMPUTE_DTYPE)
        o_sum = np.add.reduceat((o * scale)[order], heads, axis=0)[group]
        l_sum = np.add.reduceat((l * scale)[order], heads, axis=0)[group]
    owner = (owner_of == np.arange(layout.num_cores)).reshape([-1] + [1] * n_top)
    combined = np.zeros_like(output)
    combined[(core, *locs)] = np.where(owner, o_sum, 0)
    return combined, (np.where(owner, top, -np.inf).astype(COMPUTE_DTYPE),
                      np.where(owner, l_sum, 0).astype(COMPUTE_DTYPE))


def normalized(layout: OpLayout, output: np.ndarray, state: State) -> np.ndarray:
    """The output buffer divided by each row's running sum: ``softmax(score) @ value`` on
    the ring-0 cores (the others hold no output: 0 / 0)."""
    locs = output_positions(layout, layout.chunk({}))
    core = np.arange(layout.num_cores).reshape([-1] + [1] * len(layout.axes))
    result = output.copy()
    with np.errstate(all="ignore"):
        result[(core, *locs)] = output[(core, *locs)] / state[1]
    return result
