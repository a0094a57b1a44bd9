"""Questions about TE tensors and TIR expression nodes, asked while converting a TE DAG.

The conversion of :mod:`tvm_icca.lower.te_to_expr` (T10 §4.2) walks the TE that TVM's own
legalization produced and reads it with these predicates: a stage's shape, body and the combiner
of its reduction, whether two tensors are the same stage output, whether an expression is integer
index arithmetic or a data-dependent tensor read, the constants a body divides an iteration
variable by (grouped convolution, T10 §5). They only read TVM objects; nothing here builds an
expression of :mod:`runtime_sim.contract.expr`.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import te, tirx

from runtime_sim.contract.errors import UnsupportedOperatorError
from tvm_icca.ops.te_capture import ffi_key as _key


def floordiv_divisors(body: Any) -> dict[int, set[int]]:
    """For each variable ``v`` that ``body`` divides as ``v // k`` (``k`` a constant), the ``k``s."""
    found: dict[int, set[int]] = {}

    def visit(node: Any) -> None:
        if isinstance(node.a, tvm.ir.Var) and isinstance(node.b, tirx.IntImm):
            found.setdefault(_key(node.a), set()).add(int(node.b.value))

    tvm_ffi.structural_walk(body, ((tirx.FloorDiv, visit),))
    return found


def same_tensor(a: te.Tensor, b: te.Tensor) -> bool:
    """Are ``a`` and ``b`` the same output of the same TE stage?"""
    return a.op.same_as(b.op) and int(a.value_index) == int(b.value_index)


def tensor_shape(t: te.Tensor) -> tuple[int, ...]:
    """The static shape of ``t`` (dynamic shapes are refused before)."""
    return tuple(int(s) for s in t.shape)


def fixed_extent(iv: Any) -> int:
    """The extent of iteration variable ``iv`` whose range is ``[0, constant)``."""
    dom = iv.dom
    if not (isinstance(dom.min, tirx.IntImm) and int(dom.min.value) == 0
            and isinstance(dom.extent, tirx.IntImm)):
        raise UnsupportedOperatorError(
            f"axis '{iv.var.name}' has a non-constant or shifted range {dom}"
        )
    return int(dom.extent.value)


def body_of(t: te.Tensor) -> Any:
    """The expression computing ``t`` (None for a placeholder)."""
    return t.op.body[int(t.value_index)] if isinstance(t.op, te.ComputeOp) else None


def is_number(e: Any) -> bool:
    """Is ``e`` a numeric literal?"""
    return isinstance(e, (tirx.FloatImm, tirx.IntImm))


def is_intrinsic(e: Any, short_name: str) -> bool:
    """Is ``e`` a call of the TIR intrinsic ``short_name`` (``tirx.likely`` ...)?"""
    return (isinstance(e, tvm.ir.Call) and isinstance(e.op, tvm.ir.Op)
            and e.op.name.rsplit(".", 1)[-1] == short_name)


def is_tensor_load(e: Any) -> bool:
    """Is ``e`` a read of a TE tensor (``args[0]`` the tensor, the rest the index)?"""
    return isinstance(e, tvm.ir.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == "te.tensor_load"


def is_index_arith(e: Any) -> bool:
    """Integer arithmetic on iteration variables only (no tensor data involved)."""
    if not is_int(e):
        return False
    if isinstance(e, (tvm.ir.Var, tirx.IntImm)):
        return True
    if isinstance(e, tirx.Cast):
        return is_index_arith(e.value)
    if isinstance(e, (tirx.Add, tirx.Sub, tirx.Mul, tirx.FloorDiv, tirx.FloorMod, tirx.Min, tirx.Max)):
        return is_index_arith(e.a) and is_index_arith(e.b)
    if isinstance(e, tirx.Select) and isinstance(e.condition, tirx.IntImm):
        return is_index_arith(e.true_value) and is_index_arith(e.false_value)
    return False


def is_int(e: Any) -> bool:
    """Is ``e`` an expression of an integer dtype?"""
    try:
        return str(e.ty.dtype).startswith(("int", "uint"))
    except AttributeError:
        return False



def conjunction_terms(cond: Any) -> list:
    """The terms of a conjunction (``likely`` hints looked through)."""
    if isinstance(cond, tirx.And):
        return conjunction_terms(cond.a) + conjunction_terms(cond.b)
    if is_intrinsic(cond, "likely"):
        return conjunction_terms(cond.args[0])
    return [cond]


def reduction_combiner(body: tirx.Reduce, tensor: te.Tensor) -> str:
    """Name of the combiner of output ``value_index`` of a (possibly tuple) reduction."""
    comb = body.combiner
    vi = int(body.value_index)
    lhs, rhs, res = comb.lhs[vi], comb.rhs[vi], comb.result[vi]
    for cls, name in ((tirx.Add, "sum"), (tirx.Max, "max"), (tirx.Min, "min")):
        if type(res) is cls and (
            (res.a.same_as(lhs) and res.b.same_as(rhs)) or (res.a.same_as(rhs) and res.b.same_as(lhs))
        ):
            if name == "sum":
                ident = comb.identity_element[vi]
                if not (isinstance(ident, (tirx.FloatImm, tirx.IntImm)) and float(ident.value) == 0.0):
                    return "sum with a non-zero identity"
            return name
    return f"'{res}'"
