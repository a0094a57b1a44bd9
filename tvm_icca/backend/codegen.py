"""The BYOC codegen ``relax.ext.icca``.

``relax.transform.RunCodegen`` calls the global function ``relax.ext.icca(functions, options,
constant_names)`` with every region function carrying ``Codegen == "icca"`` and expects a list of
runtime modules defining one function per region ``global_symbol``; each call site becomes
``R.call_dps_packed("<global_symbol>", args)``.

The codegen decides nothing: every region arrives with its device program, planned for the
whole model by :func:`tvm_icca.model_pass.plan_device_programs` (the pass ``tvm.compile`` runs
before ``RunCodegen``, and the timing-only path too), in the region's ``icca.program``
attribute. For every region it builds a host stub: a PrimFunc named by the region's
``global_symbol`` whose only statement is
``call_packed("icca.device.run", <program JSON>, *inputs, *outputs)``.

All stubs go into one LLVM module. Unlike a Python-only runtime module, an LLVM module survives
``export_library``; the exported library needs nothing but ``import tvm_icca`` (or the
``tvm.backends`` entry point) in the loading process to find ``icca.device.run``.
"""

from __future__ import annotations

from typing import Any, Sequence

import tvm
import tvm_ffi
from tvm import relax, te, tirx
from tvm.tirx.op import _pack_buffer  # how call_packed passes a buffer (TVM's own)

from runtime_sim.contract.errors import IccaError, short_name
from tvm_icca.ffi_errors import raise_through_ffi
from tvm_icca.ops.relax_types import static_shape
from tvm_icca.partition.patterns import CODEGEN_NAME
from tvm_icca.model_pass.planner import PROGRAM_ATTR, program_of

__all__ = ["CODEGEN_FUNC", "DEVICE_RUN_FUNC", "build_device_stubs", "icca_codegen"]

#: Name of the packed function every region stub calls; :mod:`tvm_icca.device_call.device_entry`
#: registers it (the host side of a device call).
DEVICE_RUN_FUNC = "icca.device.run"

#: The global function RunCodegen looks up for ``Codegen == "icca"``.
CODEGEN_FUNC = f"relax.ext.{CODEGEN_NAME}"


def _static_tensor(ty: relax.Type, what: str, region: str) -> tuple[tuple[int, ...], str]:
    shape = static_shape(ty)
    if shape is None:
        raise IccaError(f"region '{short_name(region)}': {what} must be a tensor of known, "
                        f"static shape, got {ty}")
    return shape, str(ty.dtype)


def _region_signature(func: relax.Function, region: str) -> tuple[list, list]:
    """(shape, dtype) of each region input and output; tuple results are flattened."""
    inputs = [_static_tensor(p.ty, f"parameter '{p.name}'", region) for p in func.params]
    ret = func.ret_ty
    fields = list(ret.fields) if isinstance(ret, relax.TupleType) else [ret]
    outputs = [_static_tensor(ty, f"output {i}", region) for i, ty in enumerate(fields)]
    return inputs, outputs


def _device_stub(region: str, inputs: Sequence, outputs: Sequence, program_json: str) -> tirx.PrimFunc:
    """A PrimFunc ``region(*inputs, *outputs)`` calling ``icca.device.run``."""
    placeholders = [
        te.placeholder(shape, dtype, name=f"input{i}") for i, (shape, dtype) in enumerate(inputs)
    ]
    results = te.extern(
        [shape for shape, _ in outputs],
        placeholders,
        lambda ins, outs: tirx.call_packed(DEVICE_RUN_FUNC, program_json,
                                           *[_packed_arg(b) for b in (*ins, *outs)]),
        name=f"{region}_device_run",
        dtype=[dtype for _, dtype in outputs],
    )
    results = results if isinstance(results, list) else [results]
    return te.create_prim_func([*placeholders, *results]).with_attr("global_symbol", region)


def _packed_arg(buf: Any) -> Any:
    """How a stub hands ``buf`` to ``icca.device.run``: bfloat16 as its 16-bit pattern.

    LLVM computes no bfloat16, so TVM's TIR pipeline legalizes bfloat16 to float32
    (``BF16ComputeLegalize``), which relabels the DLTensor the packed call receives as
    float32 over the same two-byte elements. Declaring the tensor uint16 keeps the bits
    intact; :mod:`tvm_icca.device_call.device_entry` views them as bfloat16 again.
    """
    if str(buf.ty.dtype) != "bfloat16":
        return buf
    packed = _pack_buffer(buf)  # tvm_stack_make_array(data, shape, strides, ndim, dtype, offset)
    args = list(packed.args)
    args[4] = tirx.const(0, "uint16")
    return tvm.ir.Call(packed.op, args, ret_ty="handle")


def _host_target() -> tvm.target.Target:
    # Stubs run on the host: reuse the host target being compiled for (it is llvm for the
    # "icca" tags), so the stubs link with the rest of the executable; fall back to llvm.
    target = tvm.target.Target.current(allow_none=True)
    if target is not None and target.kind.name == "llvm":
        return target
    if target is not None and target.host is not None and target.host.kind.name == "llvm":
        return target.host
    return tvm.target.Target("llvm")


def build_device_stubs(regions: Sequence[relax.Function]) -> tvm.runtime.Module:
    """One LLVM module with a stub per planned region function."""
    stubs = {}
    for func in regions:
        region = str(func.attrs["global_symbol"])
        inputs, outputs = _region_signature(func, region)
        program = program_of(func)
        if len(program.inputs) != len(inputs) or len(program.outputs) != len(outputs):
            raise IccaError(
                f"device program of region '{short_name(region)}' has {len(program.inputs)} input(s) and "
                f"{len(program.outputs)} output(s), but the region has {len(inputs)} and "
                f"{len(outputs)}"
            )
        # The program text goes into the stub exactly as the planning pass wrote it.
        stubs[region] = _device_stub(region, inputs, outputs, str(func.attrs[PROGRAM_ATTR]))
    return tvm.tirx.build(tvm.IRModule(stubs), target=_host_target())


def icca_codegen(
    functions: Sequence[relax.Function], options: Any, constant_names: Any
) -> list[tvm.runtime.Module]:
    """The BYOC codegen ``relax.ext.icca``: one LLVM stub per planned ICCA region.

    ``relax.transform.RunCodegen`` calls it (it is registered under that name); users rarely
    call it directly. Each stub calls ``icca.device.run`` with its region's device program
    (module docstring).

    Parameters
    ----------
    functions : sequence of relax.Function
        The region functions (``Codegen == "icca"``), each already planned
        (:func:`~tvm_icca.model_pass.plan_device_programs`).
    options : Any
        ``RunCodegen(target_options={"icca": ...})``; unused, since the programs carry every
        decision.
    constant_names : Any
        Names of constants bound into regions; unused, since weights reach regions as
        parameters (:func:`~tvm_icca.partition.partitioner.partition_for_icca` does not bind
        constants).

    Returns
    -------
    list of tvm.runtime.Module
        One LLVM module defining a function per region ``global_symbol`` (empty without
        regions).

    Raises
    ------
    IccaError
        A region is not planned, or its program disagrees with its signature.
    """
    del options, constant_names
    try:
        return [build_device_stubs(list(functions))] if functions else []
    except IccaError as err:
        # RunCodegen is C++: register the error so it resurfaces in Python with its class.
        raise_through_ffi(err)
        raise


_INSTALLED = False


def install() -> None:
    """Register ``relax.ext.icca`` (idempotent)."""
    global _INSTALLED  # pylint: disable=global-statement
    if not _INSTALLED:
        tvm_ffi.register_global_func(CODEGEN_FUNC, icca_codegen, override=True)
        _INSTALLED = True


install()
