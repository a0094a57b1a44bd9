"""Passes of partitioning that cannot change a module, found before they run.

Partitioning an LLM of 40 or 80 layers runs TVM 0.27's ``FuseOpsByPattern`` once per pattern of
the table (more than a hundred), and each run visits every binding of ``main`` and rebuilds the
module, in time that grows faster than the bindings (8 layers of Llama2-13B decode: 2.0 s,
24 layers: 10.1 s on 2 cores). Most patterns name an operator the model
never calls (a convolution in a decoder): such a pattern cannot match, and leaving it out
changes nothing. Likewise ``FoldConstant`` legalizes every operator to see whether it folds
(6 s for Llama2-13B's 40 layers); in a model whose every operator reads a variable, nothing
folds.

Both tests are conservative: a pattern is dropped only when every way it can match needs an
operator absent from the module, and ``FoldConstant`` is skipped only when no call can have
all-constant arguments. The partitioned module is the same either way
(``tests/test_prefilter.py`` compares them structurally on the zoo).
"""

from __future__ import annotations

from typing import Sequence

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.dpl import pattern as dpl
from tvm.relax.transform import FusionPattern

__all__ = ["called_ops", "is_constant", "may_fold", "may_match", "op_calls",
           "patterns_that_may_match"]


def op_calls(expr: relax.Expr) -> list[relax.Call]:
    """Every call of a Relax operator (not of a function) inside ``expr``, in post order."""
    calls: list[relax.Call] = []

    def visit(node: object) -> None:
        if isinstance(node, relax.Call) and isinstance(node.op, tvm.ir.Op):
            calls.append(node)

    relax.analysis.post_order_visit(expr, visit)
    return calls


def called_ops(mod: IRModule) -> frozenset[str]:
    """Names of the Relax operators any Relax function of ``mod`` calls."""
    return frozenset(call.op.name for _, func in mod.functions_items()
                     if isinstance(func, relax.Function) for call in op_calls(func))


def may_match(pattern: dpl.DFPattern, ops: frozenset[str]) -> bool:
    """Whether ``pattern`` can match anything in a module calling only ``ops``: ``False``
    when each of its alternatives has a call pattern of an operator not in ``ops``."""
    if isinstance(pattern, dpl.CallPattern):
        op = pattern.op
        if isinstance(op, dpl.ExprPattern) and isinstance(op.expr, tvm.ir.Op) \
                and op.expr.name not in ops:
            return False
        return all(may_match(arg, ops) for arg in (pattern.args or ()))
    if isinstance(pattern, dpl.OrPattern):
        return may_match(pattern.left, ops) or may_match(pattern.right, ops)
    if isinstance(pattern, dpl.AndPattern):
        return may_match(pattern.left, ops) and may_match(pattern.right, ops)
    if isinstance(pattern, (dpl.AttrPattern, dpl.DataTypePattern, dpl.ShapePattern,
                            dpl.TypePattern)):
        return may_match(pattern.pattern, ops)
    return True  # wildcards, tuples, constants, ...: no operator to miss


def patterns_that_may_match(patterns: Sequence[FusionPattern], mod: IRModule) -> list[FusionPattern]:
    """``patterns`` (in their order, which is their priority) less those that cannot match
    anything in ``mod`` (:func:`may_match`)."""
    ops = called_ops(mod)
    return [p for p in patterns if may_match(p.pattern, ops)]


def may_fold(mod: IRModule) -> bool:
    """Whether ``FoldConstant`` can change ``mod``: some call of a Relax function has a
    constant argument and no argument that is a variable (a parameter, or a binding of
    anything but a constant), or some variable is bound to a constant. Otherwise no call's
    arguments are all constant, so none folds, and none becomes foldable."""
    def non_constant_var(expr: relax.Expr, constant_vars: set) -> bool:
        if isinstance(expr, relax.Var):
            return expr not in constant_vars
        if isinstance(expr, relax.Tuple):
            return any(non_constant_var(field, constant_vars) for field in expr.fields)
        return False

    for _, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        constant_vars: set = set()
        calls: list[relax.Call] = []

        def visit(node: object) -> None:
            if isinstance(node, relax.SeqExpr):
                constant_vars.update(b.var for block in node.blocks for b in block.bindings
                                     if isinstance(b, relax.VarBinding)
                                     and isinstance(b.value, tvm.ir.Constant))
            elif isinstance(node, relax.Call):
                calls.append(node)

        relax.analysis.post_order_visit(func, visit)
        if constant_vars or any(not any(non_constant_var(a, constant_vars) for a in call.args)
                                and any(is_constant(a) for a in call.args) for call in calls):
            return True
    return False


def is_constant(expr: relax.Expr) -> bool:
    """Whether ``expr`` is a constant tensor (or a tuple holding one). A call with none, such
    as ``arange`` or ``zeros`` of a shape, is not folded by ``FoldConstant`` (it would
    materialize a tensor from nothing: a causal mask's ``arange`` at 32K tokens)."""
    if isinstance(expr, tvm.ir.GenericConst):
        return True
    if isinstance(expr, relax.Tuple):
        return any(is_constant(field) for field in expr.fields)
    return False
