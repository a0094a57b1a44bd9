"""Check the arguments of an ICCA-compiled executable before the Relax VM does.

What TVM 0.27 does (checked on this machine): ``relax.transform.VMShapeLower`` (in the default
build pipeline) lowers each parameter's annotation of a public function into
``vm.builtin.check_tensor_info`` (ndim and dtype) and ``vm.builtin.match_shape`` (every
dimension) at the very start of the function, implemented in C++. A wrong argument then
reaches Python as ``ValueError: Check failed: (ptr->dtype == dtype.value()) is false:
ErrorContext(fn=main, loc=param[0], param=x, ...) expect Tensor with dtype float32 but get
float16`` (wrong dtype or rank) or ``RuntimeError: Check failed: input_shape[i] == reg (15 vs.
16) ... match_cast error, shape[1] mismatch to specified constant`` (wrong dimension). The
argument count is checked by the VM itself before any instruction (``tvm.error.InternalError``:
``Invoking function main expects 2 arguments``) and cannot be intercepted from the IR.
Overriding the ``vm.builtin.*`` globals would change every target, so this module does not.

Instead, :func:`check_inputs_pass` (for ICCA pipelines only) rewrites every public Relax
function: its tensor parameters are taken with a loose annotation (``R.Tensor(ndim=-1,
dtype="")``), the body starts with a call of the packed function ``icca.check_inputs`` (the
function's name and its expected shapes and dtypes as JSON, then the arguments), which raises
:class:`~runtime_sim.contract.errors.InputMismatchError` naming the parameter, the expected and the
given shape and dtype; then each parameter is ``match_cast`` back to its original annotation,
binding the original variable, so the rest of the function is unchanged (and the VM's own
checks still run after ours). The function becomes impure (it calls a packed function for its
effect). Executables built for other targets are not touched.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import tvm
import tvm_ffi
from tvm import relax
from tvm.ir import IRModule

from runtime_sim.contract.errors import InputMismatchError
from tvm_icca.ffi_errors import raise_through_ffi

__all__ = ["INPUT_CHECK_FUNC", "RUN_BEGIN_FUNC", "check_inputs", "check_inputs_pass"]

#: Name of the packed function called at the start of every public function.
INPUT_CHECK_FUNC = "icca.check_inputs"

#: Name of the packed function told that a call of a compiled function begins (registered by
#: :mod:`tvm_icca.device_call.device_entry`): the run statistics then cover exactly this call, also
#: when it runs nothing on the chip (a model left on the host must not show the last model's).
RUN_BEGIN_FUNC = "icca.device.begin_run"


@functools.lru_cache(maxsize=256)
def _signature(text: str) -> tuple[str, list[dict[str, Any]]]:
    data = json.loads(text)
    return data["function"], data["params"]


def check_inputs(signature: str, *args: Any) -> None:
    """The body of ``icca.check_inputs``: start the run's statistics (:data:`RUN_BEGIN_FUNC`),
    then raise :class:`InputMismatchError` for the first argument whose shape or dtype differs
    from what the compiled function expects."""
    function, params = _signature(str(signature))
    begin = tvm_ffi.get_global_func(RUN_BEGIN_FUNC, allow_missing=True)
    if begin is not None:
        begin()
    try:
        for i, (spec, arg) in enumerate(zip(params, args)):
            if spec is None:
                continue
            where = f"argument {i} ('{spec['name']}') of the ICCA-compiled function '{function}'"
            shape = getattr(arg, "shape", None)
            dtype = getattr(arg, "dtype", None)
            if shape is None or dtype is None:
                raise InputMismatchError(f"{where} must be a tensor, got {type(arg).__name__}")
            given = [int(s) for s in shape]
            want = spec["shape"]
            expected = "[" + ", ".join("?" if s is None else str(s) for s in want) + "]" \
                if want is not None else "any shape"
            wrong_shape = want is not None and (
                len(want) != len(given) or any(w is not None and w != g for w, g in zip(want, given)))
            wrong_dtype = spec["dtype"] and str(dtype) != spec["dtype"]
            if wrong_shape or wrong_dtype:
                raise InputMismatchError(
                    f"{where} expects a {spec['dtype'] or 'tensor'} tensor of shape {expected}, "
                    f"but was given a {dtype} tensor of shape {given}"
                )
    except InputMismatchError as err:
        raise_through_ffi(err)
        raise


def _param_spec(var: relax.Var) -> dict[str, Any] | None:
    ty = var.ty
    if not isinstance(ty, relax.TensorType):
        return None
    shape = None
    if ty.shape is not None and isinstance(ty.shape, relax.ShapeExpr):
        shape = [int(v) if isinstance(v, tvm.tirx.IntImm) else None for v in ty.shape.values]
    elif ty.ndim >= 0:
        shape = [None] * ty.ndim
    dtype = _dtype_name(ty.dtype)
    if shape is None and not dtype:
        return None
    return {"name": var.name, "shape": shape, "dtype": dtype}


def _with_input_check(name: str, func: relax.Function) -> relax.Function:
    specs = [_param_spec(p) for p in func.params]
    # Parameters after ``num_input`` are the model's weights (relax.frontend.nn exports):
    # TVM's build pipeline relies on their annotations (loosening them crashes it), so only
    # the inputs proper are checked here; weights keep the VM's own check.
    num_input = func.attrs.get("num_input") if func.attrs is not None else None
    if num_input is not None:
        specs = [s if i < int(num_input) else None for i, s in enumerate(specs)]
    if not any(specs) or not isinstance(func.body, relax.SeqExpr):
        return func
    loose, casts = [], []
    for p, spec in zip(func.params, specs):
        if spec is None:
            loose.append(p)
            continue
        q = relax.Var(p.name, relax.TensorType(None, dtype="", ndim=-1))
        loose.append(q)
        casts.append(relax.MatchCast(p, q, p.ty))
    signature = json.dumps({"function": name, "params": specs}, separators=(",", ":"))
    call = relax.Call(relax.ExternFunc(INPUT_CHECK_FUNC), [tvm.ir.StringImm(signature), *loose],
                      ty_args=[relax.ObjectType()])
    prologue = relax.BindingBlock([relax.VarBinding(relax.Var("_icca_inputs_checked", relax.ObjectType()), call),
                                   *casts])
    body = relax.SeqExpr([prologue, *func.body.blocks], func.body.body)
    return relax.Function(loose, body, func.ret_ty, is_pure=False, attrs=func.attrs, span=func.span)


def check_inputs_pass() -> tvm.transform.Pass:
    """A module pass that makes every public Relax function check its arguments with
    ``icca.check_inputs`` first (see the module docstring). Run it in ICCA pipelines only,
    before the host build pipeline (``VMShapeLower``)."""

    @tvm.transform.module_pass(opt_level=0, name="IccaCheckInputs")
    def _pass(mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        updates = {}
        for gvar, func in mod.functions_items():
            if isinstance(func, relax.Function) and func.attrs is not None \
                    and "global_symbol" in func.attrs and "Codegen" not in func.attrs:
                new = _with_input_check(gvar.name_hint, func)
                if new is not func:
                    updates[gvar] = new
        if not updates:
            return mod
        mod = mod.clone() if hasattr(mod, "clone") else IRModule(dict(mod.functions_items()), attrs=mod.attrs)
        for gvar, func in updates.items():
            mod[gvar] = func
        return mod

    return _pass


tvm_ffi.register_global_func(INPUT_CHECK_FUNC, check_inputs, override=True)


def _dtype_name(dtype: Any) -> str:
    """``"float32"`` for ``T.float32`` / ``float32``; ``""`` when the annotation has none."""
    if dtype is None:
        return ""
    text = str(dtype)
    text = text[2:] if text.startswith("T.") else text
    return "" if text in ("", "void") else text
