"""Hand-built tensor expressions of common operators, and random valid plans.

Tests, tutorials and the cost-model profiler use them to exercise plans and the device
without going through TVM. Each builder writes the expression directly from the operator's
definition (the TE-derived ones come from :mod:`tvm_icca.lower.te_to_expr`).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from runtime_sim.contract.errors import InvalidPlanError
from runtime_sim.contract.expr import AffineIndex, Axis, TensorAccess, TensorExpr, make_load
from runtime_sim.contract.layout import OpLayout
from runtime_sim.contract.plan import ExecutionPlan
from runtime_sim.contract.plan_rules import fixed_axes, local_splits, padding_safe_reduce, pinned_axes


def ax(name: str) -> AffineIndex:
    return AffineIndex.of_axis(name)


def load(i: int, index) -> dict:
    return make_load(i, index)


def op(name: str, *args: dict, **extra) -> dict:
    return {"op": name, "args": list(args), **extra}


def const(v: float) -> dict:
    return {"op": "const", "value": float(v)}


def matmul(M: int, K: int, N: int, dtype: str = "float32", transpose_b: bool = False,
           batch: int | None = None) -> TensorExpr:
    """C[(b,) m, n] = sum_k A[(b,) m, k] * B[(b,) k, n] (B indexed [n, k] when transposed)."""
    pre = (ax("b"),) if batch else ()
    bshape = (batch,) if batch else ()
    a = TensorAccess("A", bshape + (M, K), dtype, pre + (ax("m"), ax("k")))
    if transpose_b:
        b = TensorAccess("B", bshape + (N, K), dtype, pre + (ax("n"), ax("k")))
    else:
        b = TensorAccess("B", bshape + (K, N), dtype, pre + (ax("k"), ax("n")))
    c = TensorAccess("C", bshape + (M, N), dtype, pre + (ax("m"), ax("n")))
    axes = ((Axis("b", batch),) if batch else ()) + (Axis("m", M), Axis("n", N), Axis("k", K, True))
    body = op("mul", load(0, a.indices), load(1, b.indices))
    return TensorExpr("matmul", axes, (a, b), c, body)


def conv_out(size: int, k: int, stride: int, pad: int, dilation: int) -> int:
    return (size + 2 * pad - dilation * (k - 1) - 1) // stride + 1


def conv2d(B: int, C: int, H: int, W: int, O: int, KH: int, KW: int, stride: int = 1,
           pad: int = 0, dilation: int = 1, dtype: str = "float32") -> TensorExpr:
    """NCHW conv: O[b,o,y,x] = sum I[b,c,y*s+kh*d-pad, x*s+kw*d-pad] * W[o,c,kh,kw]."""
    OH, OW = conv_out(H, KH, stride, pad, dilation), conv_out(W, KW, stride, pad, dilation)
    h = AffineIndex((("y", stride), ("kh", dilation)), -pad)
    w = AffineIndex((("x", stride), ("kw", dilation)), -pad)
    inp = TensorAccess("I", (B, C, H, W), dtype, (ax("b"), ax("c"), h, w))
    wt = TensorAccess("W", (O, C, KH, KW), dtype, (ax("o"), ax("c"), ax("kh"), ax("kw")))
    out = TensorAccess("O", (B, O, OH, OW), dtype, (ax("b"), ax("o"), ax("y"), ax("x")))
    axes = (Axis("b", B), Axis("o", O), Axis("y", OH), Axis("x", OW),
            Axis("c", C, True), Axis("kh", KH, True), Axis("kw", KW, True))
    body = op("mul", load(0, inp.indices), load(1, wt.indices))
    return TensorExpr("conv2d", axes, (inp, wt), out, body)


def bias_add(M: int, N: int, dtype: str = "float32") -> TensorExpr:
    """Y[i,j] = X[i,j] + b[0,j] (b has shape [1, N]: a constant index dimension)."""
    x = TensorAccess("X", (M, N), dtype, (ax("i"), ax("j")))
    b = TensorAccess("b", (1, N), dtype, (AffineIndex((), 0), ax("j")))
    y = TensorAccess("Y", (M, N), dtype, (ax("i"), ax("j")))
    body = op("add", load(0, x.indices), load(1, b.indices))
    return TensorExpr("elementwise", (Axis("i", M), Axis("j", N)), (x, b), y, body)


def softmax(M: int, N: int, dtype: str = "float32") -> TensorExpr:
    """exp(x[i,j] - max_k x[i,k]) / sum_l exp(x[i,l] - max_k2 x[i,k2])."""
    x = TensorAccess("X", (M, N), dtype, (ax("i"), ax("j")))
    y = TensorAccess("Y", (M, N), dtype, (ax("i"), ax("j")))

    def row_max(k: str) -> dict:
        return {"op": "reduce", "combiner": "max", "axes": [k], "args": [load(0, (ax("i"), ax(k)))]}

    num = op("exp", op("sub", load(0, x.indices), row_max("k")))
    den = {"op": "reduce", "combiner": "sum", "axes": ["l"],
           "args": [op("exp", op("sub", load(0, (ax("i"), ax("l"))), row_max("k2")))]}
    return TensorExpr("softmax", (Axis("i", M), Axis("j", N)), (x,), y, op("div", num, den),
                      local_axes=(Axis("k", N), Axis("l", N), Axis("k2", N)))


def layer_norm(M: int, N: int, eps: float = 1e-5, dtype: str = "float32") -> TensorExpr:
    """(x[i,j] - mean_i) * rsqrt(var_i + eps) * gamma[j] + beta[j], statistics over core-local
    axes (the form the TE extraction gives ``relax.nn.layer_norm``)."""
    x = TensorAccess("X", (M, N), dtype, (ax("i"), ax("j")))
    gamma = TensorAccess("gamma", (N,), dtype, (ax("j"),))
    beta = TensorAccess("beta", (N,), dtype, (ax("j"),))
    y = TensorAccess("Y", (M, N), dtype, (ax("i"), ax("j")))

    def mean(k: str) -> dict:
        row = {"op": "reduce", "combiner": "sum", "axes": [k], "args": [load(0, (ax("i"), ax(k)))]}
        return op("div", row, const(N))

    centered = op("sub", load(0, (ax("i"), ax("l"))), mean("k2"))
    var = op("div", {"op": "reduce", "combiner": "sum", "axes": ["l"],
                     "args": [op("mul", centered, centered)]}, const(N))
    norm = op("mul", op("sub", load(0, x.indices), mean("k")), op("rsqrt", op("add", var, const(eps))))
    body = op("add", op("mul", norm, load(1, gamma.indices)), load(2, beta.indices))
    return TensorExpr("layer_norm", (Axis("i", M), Axis("j", N)), (x, gamma, beta), y, body,
                      local_axes=(Axis("k", N), Axis("l", N), Axis("k2", N)))


def rms_norm(M: int, N: int, eps: float = 1e-5, dtype: str = "float32") -> TensorExpr:
    """x[i,j] * rsqrt(sum_k x[i,k]^2 / N + eps) * w[j] (Llama's RMSNorm), the statistic over a
    core-local axis."""
    x = TensorAccess("X", (M, N), dtype, (ax("i"), ax("j")))
    w = TensorAccess("w", (N,), dtype, (ax("j"),))
    y = TensorAccess("Y", (M, N), dtype, (ax("i"), ax("j")))
    xk = load(0, (ax("i"), ax("k")))
    ms = op("div", {"op": "reduce", "combiner": "sum", "axes": ["k"], "args": [op("mul", xk, xk)]},
            const(N))
    body = op("mul", op("mul", load(0, x.indices), op("rsqrt", op("add", ms, const(eps)))),
              load(1, w.indices))
    return TensorExpr("layer_norm", (Axis("i", M), Axis("j", N)), (x, w), y, body,
                      local_axes=(Axis("k", N),))


def row_sum(M: int, N: int, mean: bool = False, dtype: str = "float32") -> TensorExpr:
    """Y[i] = sum_k X[i,k] (divided by N in the epilogue for a mean)."""
    x = TensorAccess("X", (M, N), dtype, (ax("i"), ax("k")))
    y = TensorAccess("Y", (M,), dtype, (ax("i"),))
    epi = op("div", {"op": "result"}, const(N)) if mean else None
    return TensorExpr("reduce", (Axis("i", M), Axis("k", N, True)), (x,), y, load(0, x.indices),
                      epilogue=epi)


def matmul_bias_relu(M: int, K: int, N: int, dtype: str = "float32") -> TensorExpr:
    """relu(A @ B + bias[n]) with bias and relu in the epilogue."""
    mm = matmul(M, K, N, dtype)
    bias = TensorAccess("bias", (N,), dtype, (ax("n"),))
    epi = op("max", op("add", {"op": "result"}, load(2, bias.indices)), const(0.0))
    return TensorExpr("matmul", mm.axes, mm.inputs + (bias,), mm.output, mm.body,
                      epilogue=epi, epilogue_inputs=(2,))


def attention_expr(rows: int, keys: int, head_dim: int, *, batch: Sequence[int] = (),
                   group: int = 1, value_dim: int | None = None, scale: float | None = None,
                   mask: bool = False, causal: bool = False, softcap: float | None = None,
                   dtype: str = "float32", mask_dtype: str | None = None) -> TensorExpr:
    """The fused attention operator, ``O = softmax(score) @ V``, as the device runs it.

    ``score[.., i, j] = mask(softcap(scale * sum_k Q[.., i, k] K[.., j, k]))``: ``scale``
    (default ``1 / sqrt(head_dim)``), Gemma 2's soft-cap ``c * tanh(s / c)`` when
    ``softcap`` is ``c``, then an additive mask input ``M[i, j]`` (``mask``, of
    ``mask_dtype``, default ``dtype``) and/or a causal mask written on the axis values
    (``causal``: key ``j`` is masked after query ``i + keys - rows``, with the dtype's lowest
    finite value, as exporters write it). Axes: the ``batch`` axes ``b0, b1, ..`` (e.g. batch
    and KV heads), then with ``group > 1`` the query heads ``g`` of a KV head (grouped-query
    attention: Q and O are indexed ``[.., g, i, ..]``, K and V lack ``g``), the query rows
    ``i``, the value features ``d`` (``value_dim``, default ``head_dim``) and the keys ``j``
    (the reduction); the head dimension ``k`` is core-local. Every tensor is ``dtype``.
    """
    value_dim = head_dim if value_dim is None else value_dim
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    names = tuple(f"b{n}" for n in range(len(batch)))
    pre = tuple(ax(a) for a in names)
    heads = (ax("g"),) if group > 1 else ()
    head_shape = (group,) if group > 1 else ()
    q = TensorAccess("Q", (*batch, *head_shape, rows, head_dim), dtype, (*pre, *heads, ax("i"), ax("k")))
    k = TensorAccess("K", (*batch, keys, head_dim), dtype, (*pre, ax("j"), ax("k")))
    v = TensorAccess("V", (*batch, keys, value_dim), dtype, (*pre, ax("j"), ax("d")))
    o = TensorAccess("O", (*batch, *head_shape, rows, value_dim), dtype, (*pre, *heads, ax("i"), ax("d")))
    inputs = [q, k, v]
    dot = {"op": "reduce", "combiner": "sum", "axes": ["k"],
           "args": [op("mul", load(0, q.indices), load(1, k.indices))]}
    score = op("mul", dot, const(scale))
    if softcap is not None:
        score = op("mul", const(softcap), op("tanh", op("div", score, const(softcap))))
    if mask:
        m = TensorAccess("M", (rows, keys), mask_dtype or dtype, (ax("i"), ax("j")))
        inputs.append(m)
        score = op("add", score, load(3, m.indices))
    if causal:
        lowest = float(np.finfo(np.dtype(dtype)).min)
        after = op("gt", {"op": "axis", "axis": "j"},
                   op("add", {"op": "axis", "axis": "i"}, const(keys - rows)))
        score = op("select", after, const(lowest), score)
    axes = (*(Axis(a, n) for a, n in zip(names, batch)), *((Axis("g", group),) if group > 1 else ()),
            Axis("i", rows), Axis("d", value_dim), Axis("j", keys, True))
    return TensorExpr("attention", axes, tuple(inputs), o,
                      {"op": "attention", "args": [score, load(2, v.indices)]},
                      local_axes=(Axis("k", head_dim),), combiner="softmax")


def attention_reference(q: Any, k: Any, v: Any, *, mask: Any = None, causal: bool = False,
                        softcap: float | None = None, scale: float | None = None,
                        dtype: str = "float32") -> Any:
    """``softmax(score) @ v`` in float32 numpy for the arguments of :func:`attention_expr`
    (same keywords), written from the definition (three separate steps, no recurrence): the
    independent reference of the device's fused operator. ``q`` has the query heads of a
    KV head on the axis before its rows when the expression has ``group > 1``."""
    q, k, v = (np.asarray(x, np.float32) for x in (q, k, v))
    if q.ndim == k.ndim + 1:  # grouped-query: every query head of a KV head reads its K and V
        k, v = k[..., None, :, :], v[..., None, :, :]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * np.float32(scale)
    if softcap is not None:
        s = np.float32(softcap) * np.tanh(s / np.float32(softcap))
    if mask is not None:
        s = s + np.asarray(mask, np.float32)
    rows, keys = q.shape[-2], k.shape[-2]
    if causal:
        after = np.arange(keys)[None, :] > np.arange(rows)[:, None] + (keys - rows)
        s = np.where(after, np.float32(np.finfo(np.dtype(dtype)).min), s)
    with np.errstate(all="ignore"):
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        p = e / e.sum(axis=-1, keepdims=True)
    return np.matmul(p, v).astype(np.float32)


def random_plan(choose: Callable[[Sequence], Any], expr: TensorExpr, max_cores: int,
                core_order: bool = False) -> ExecutionPlan:
    """A random *valid* plan of ``expr`` on at most ``max_cores`` cores.

    ``choose(options)`` picks one element of a non-empty sequence (a hypothesis draw in tests,
    a numpy generator when profiling). F_op is drawn axis by axis within the core budget; each
    tensor then gets temporal factors on its rotatable axes whose product divides the cores
    sharing its sub-tensors (T10 §4.2); a loop order is drawn too, and with ``core_order`` a
    permutation of the axes that numbers the cores (the mapping to physical cores). A pinned
    axis that core-local reductions follow (:func:`runtime_sim.contract.plan_rules.local_splits`) gets a
    divisor of its extent, splitting those reductions across cores. Candidates that break
    another T10 rule fall back to the same F_op without rotation, which is always valid.
    """
    pinned = pinned_axes(expr)
    still = pinned | fixed_axes(expr)  # axes no tensor rotates on
    rows = set(local_splits(expr).values())
    # reduction axes that must not be padded are split by divisors of their extent
    exact = set() if padding_safe_reduce(expr) else set(expr.reduce_axes)
    F: dict[str, int] = {}
    budget = max_cores
    for a in expr.axes:
        if a.name in pinned:
            if a.name in rows:
                F[a.name] = choose([d for d in range(1, min(a.extent, budget) + 1) if a.extent % d == 0])
                budget //= F[a.name]
            continue
        if a.name in exact:
            F[a.name] = choose([d for d in range(1, max(1, min(a.extent, budget)) + 1) if a.extent % d == 0])
            budget //= F[a.name]
            continue
        f = choose(range(1, max(1, min(a.extent, budget)) + 1))
        F[a.name] = f
        budget //= f
    n = len(expr.tensors)
    base = OpLayout(expr, ExecutionPlan(F, tuple({} for _ in range(n))))
    temporal = []
    for t, access in enumerate(expr.tensors):
        ft: dict[str, int] = {}
        if t not in expr.epilogue_inputs:
            ring = base.sharing(t)
            for a in base.tensor_axes(t):
                dims = [i for i in access.indices if a in i.axes]
                if a in still or len(dims) != 1 or not dims[0].is_simple or ring == 1:
                    continue
                f = choose([d for d in range(1, ring + 1) if ring % d == 0])
                if f > 1:
                    ft[a] = f
                    ring //= f
        temporal.append(ft)
    stepping = sorted({a for ft in temporal for a in ft})
    order = []
    while stepping:
        order.append(stepping.pop(stepping.index(choose(stepping))))
    cores: tuple[str, ...] = ()
    if core_order:  # a random mapping of the core grid too (ExecutionPlan.core_order)
        left = list(expr.axis_names)
        cores = tuple(left.pop(left.index(choose(left))) for _ in range(len(left)))
    plan = ExecutionPlan(F, tuple(temporal), tuple(order), cores)
    try:
        OpLayout(expr, plan).validate()
        return plan
    except InvalidPlanError:
        plan = ExecutionPlan(F, tuple({} for _ in range(n)), (), cores)
        OpLayout(expr, plan).validate()
        return plan
