"""A zoo LLM's prefill with its attention masks passed by the host, as tensors.

The zoo builds its causal and sliding-window masks in the graph, which the compiler turns into
predicates on the attention's axes (:mod:`tvm_icca.ops.masks`). :func:`with_host_masks` gives
the same model with each mask a parameter of ``main`` instead (tensor kind ``mask``, after the
inputs), as a model whose mask is computed from an input (padding) has it: a fused attention
that reads an ``[S, S]`` tensor, for the tests that need one (an attention too large for a small
chip, split into pieces).
"""

from __future__ import annotations

from dataclasses import replace

from tvm import relax

from tvm_icca.ops.masks import band_of_relax
from tvm_icca.workloads import TensorSpec, Workload
from tvm_icca.workloads._layers import causal_mask_sampler

__all__ = ["with_host_masks"]


@relax.expr_functor.mutator
class _Lift(relax.PyExprMutator):
    def __init__(self, roots: dict) -> None:
        super().__init__()
        self.roots = roots

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        for var, param in self.roots.items():
            if var.same_as(binding.var):
                self.set_var_remap(binding.var, param)
                return
        super().visit_var_binding_(binding)


def with_host_masks(workload: Workload) -> Workload:
    """``workload`` (a zoo LLM's prefill or training) with every mask it adds to attention
    scores a ``mask`` parameter (``causal_mask``, ``sliding_mask``) after its inputs."""
    func = workload.mod["main"]
    bindings = [b for block in func.body.blocks for b in block.bindings]
    bound = {b.var: b.value for b in bindings}
    seq = workload.config["seq_len"]
    roots: dict = {}
    specs: list[TensorSpec] = []
    for b in bindings:
        call = b.value
        if not (isinstance(call, relax.Call) and getattr(call.op, "name", "") == "relax.add"):
            continue
        for mask in call.args:
            if not isinstance(mask, relax.Var) or any(mask.same_as(r) for r in roots):
                continue
            band = band_of_relax(mask, bound, seq, seq)
            if band is None:
                continue
            window = None if band.lower is None else 1 - band.lower
            name = "causal_mask" if window is None else "sliding_mask"
            dtype = str(mask.ty.dtype)
            roots[mask] = relax.Var(name, relax.TensorType((seq, seq), dtype))
            specs.append(TensorSpec(name, (seq, seq), dtype, "mask",
                                    causal_mask_sampler(seq, dtype, window)))
    inputs = [p for p in workload.params if p.kind == "input"]
    params = list(func.params)
    new_params = params[:len(inputs)] + list(roots.values()) + params[len(inputs):]
    body = _Lift(roots).visit_expr(func.body)
    new = relax.Function(new_params, body, func.ret_ty, func.is_pure, func.attrs)
    mod = workload.mod.__class__({"main": relax.analysis.remove_all_unused(new)})
    all_specs = tuple(inputs) + tuple(specs) + tuple(p for p in workload.params if p.kind != "input")
    return replace(workload, mod=mod, params=all_specs)
