"""Short, stable names for the region functions ``MergeCompositeFunctions`` forms.

TVM names a merged region after every composite it holds, joined with underscores
(``fused_relax_take_relax_reshape_relax_nn_rms_norm_...``). A region that holds a whole LLM
gets a 32,768-character symbol, and every operator of its device program carries that
symbol as a prefix: Llama2-13B's program was 185 MB of JSON, almost all of it the region's
name repeated, and serialising, attaching and parsing it cost seconds per compile.

:func:`shorten_region_names` keeps a symbol of at most :data:`REGION_NAME_CHARS`
characters and cuts a longer one to its head plus a digest of the whole: still TVM's
``fused_...`` name a reader recognises, unique (two regions differ in their digests), and the
same for the same model on every run.
"""

from __future__ import annotations

import hashlib

import tvm
from tvm import relax
from tvm.ir import IRModule

from runtime_sim.contract.errors import MAX_NAME_CHARS

__all__ = ["REGION_NAME_CHARS", "shorten_region_names"]

#: Longest region symbol kept as TVM wrote it: as long as a message shows a name in full
#: (:data:`runtime_sim.contract.errors.MAX_NAME_CHARS`).
REGION_NAME_CHARS = MAX_NAME_CHARS
_DIGEST_CHARS = 8   # hex digits of SHA-1 appended to a shortened symbol


def short_region_symbol(symbol: str, taken: set[str], suffix: str = "") -> str:
    """``symbol`` itself when short enough, else its head cut at an underscore, the first
    :data:`_DIGEST_CHARS` hex digits of its SHA-1 and ``suffix`` when the symbol ends with it
    (TVM ends a region's symbol with its codegen's name), not in ``taken``."""
    if len(symbol) <= REGION_NAME_CHARS:
        return symbol
    tail = suffix if suffix and symbol.endswith(suffix) else ""
    digest = hashlib.sha1(symbol.encode()).hexdigest()[:_DIGEST_CHARS]
    head = symbol[: REGION_NAME_CHARS - _DIGEST_CHARS - 1 - len(tail)]
    if "_" in head[1:]:
        head = head[: head.rindex("_")]
    name, k = f"{head}_{digest}{tail}", 0
    while name in taken:    # a 32-bit digest collision: keep the name unique anyway
        k += 1
        name = f"{head}_{digest}_{k}{tail}"
    return name


def shorten_region_names(mod: IRModule, codegen: str) -> IRModule:
    """``mod`` with every ``Codegen == codegen`` function whose symbol is longer than
    :data:`REGION_NAME_CHARS` renamed (:func:`short_region_symbol`), its callers calling the
    new name; ``mod`` itself when no name is too long."""
    taken = {gvar.name_hint for gvar in mod.get_global_vars()}
    renames: dict[tvm.ir.GlobalVar, str] = {}
    for gvar, func in mod.functions_items():
        if (isinstance(func, relax.Function) and func.attrs is not None
                and func.attrs.get("Codegen") == codegen):
            symbol = str(func.attrs.get("global_symbol", gvar.name_hint))
            short = short_region_symbol(symbol, taken, f"_{codegen}")
            if short != symbol:
                taken.add(short)
                renames[gvar] = short
    return _Rename(mod, renames).transform() if renames else mod


@relax.expr_functor.mutator
class _Rename(relax.PyExprMutator):
    """Renamed region functions, and every Relax function calling them through a new
    GlobalVar."""

    def __init__(self, mod: IRModule, renames: dict[tvm.ir.GlobalVar, str]) -> None:
        super().__init__(mod)
        self._mod = mod
        self._renames = renames
        self._new: dict[tvm.ir.GlobalVar, tvm.ir.GlobalVar] = {}

    def transform(self) -> IRModule:
        for gvar, name in self._renames.items():
            func = self._mod[gvar].with_attr("global_symbol", name)
            self._new[gvar] = self.builder_.add_func(func, name)
        for gvar, func in self._mod.functions_items():
            if gvar in self._renames or not isinstance(func, relax.Function):
                continue
            if func.attrs is not None and "Codegen" in func.attrs:
                continue    # a region calls no other function
            self.builder_.update_func(gvar, self.visit_expr(func))
        mod = self.builder_.get()
        for gvar in self._renames:
            del mod[gvar]   # its callers call the new name now
        return mod

    def visit_call_(self, call: relax.Call) -> relax.Expr:  # pylint: disable=arguments-renamed
        call = super().visit_call_(call)
        target = self._new.get(call.op) if isinstance(call.op, tvm.ir.GlobalVar) else None
        if target is None:
            return call
        return relax.Call(target, call.args, call.attrs, call.ty_args)

