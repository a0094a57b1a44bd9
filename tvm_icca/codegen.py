"""The BYOC codegen ``relax.ext.icca``.

``relax.transform.RunCodegen`` calls the global function ``relax.ext.icca(functions, options,
constant_names)`` with every region function carrying ``Codegen == "icca"`` and expects a list of
runtime modules defining one function per region ``global_symbol``; each call site becomes
``R.call_dps_packed("<global_symbol>", args)``.

For every region this codegen

1. compiles the region into a :class:`runtime_sim.program.DeviceProgram` with
   :func:`tvm_icca.compiler.compile_region` (tensor expressions, rTensor plan search, ...) for
   the chip stamped on the region by :func:`tvm_icca.partition.partition_for_icca`;
2. builds a host stub: a PrimFunc named by the region's ``global_symbol`` whose only statement
   is ``call_packed("icca.device.run", <program JSON>, *inputs, *outputs)``.

All stubs go into one LLVM module. Unlike a Python-only runtime module, an LLVM module survives
``export_library``; the exported library needs nothing but ``import tvm_icca`` (or the
``tvm.backends`` entry point) in the loading process to find ``icca.device.run``.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Sequence

import tvm
import tvm_ffi
from tvm import relax, te, tirx

from runtime_sim.errors import IccaError
from runtime_sim.program import DeviceProgram

from .device_entry import DEVICE_RUN_FUNC, raise_through_ffi
from .hardware import HardwareSpec, current_hardware
from .partition import region_hardware
from .patterns import CODEGEN_NAME
from .relax_types import static_shape

__all__ = ["CODEGEN_FUNC", "build_device_stubs", "compile_region_program", "icca_codegen"]

#: The global function RunCodegen looks up for ``Codegen == "icca"``.
CODEGEN_FUNC = f"relax.ext.{CODEGEN_NAME}"


def _static_tensor(ty: relax.Type, what: str, region: str) -> tuple[tuple[int, ...], str]:
    shape = static_shape(ty)
    if shape is None:
        raise IccaError(f"region '{region}': {what} must be a tensor of known, static shape, got {ty}")
    return shape, str(ty.dtype)


def _region_signature(func: relax.Function, region: str) -> tuple[list, list]:
    """(shape, dtype) of each region input and output; tuple results are flattened."""
    inputs = [_static_tensor(p.ty, f"parameter '{p.name}'", region) for p in func.params]
    ret = func.ret_ty
    fields = list(ret.fields) if isinstance(ret, relax.TupleType) else [ret]
    outputs = [_static_tensor(ty, f"output {i}", region) for i, ty in enumerate(fields)]
    return inputs, outputs


def compile_region_program(func: relax.Function, region: str, hw: HardwareSpec) -> DeviceProgram:
    """Compile one region with the compiler, turning foreign failures into :class:`IccaError`."""
    try:
        from . import compiler  # pylint: disable=import-outside-toplevel
    except ImportError as err:
        raise IccaError(f"the ICCA region compiler (tvm_icca.compiler) is unavailable: {err}") from None
    try:
        program = compiler.compile_region(func, region, hw)
    except IccaError:
        raise
    except Exception as err:  # pylint: disable=broad-except
        # TVM errors (LegalizeOps, TE lowering, ...) carry long C++ context; the user needs to
        # know which region of which chip failed, and the cause stays chained for debugging.
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise IccaError(
            f"ICCA codegen failed for region '{region}' on chip '{hw.name}': "
            f"{type(err).__name__}: {first_line}"
        ) from err
    if not isinstance(program, DeviceProgram):
        raise IccaError(
            f"tvm_icca.compiler.compile_region returned {type(program).__name__} for region "
            f"'{region}', expected a DeviceProgram"
        )
    return program


def _device_stub(region: str, inputs: Sequence, outputs: Sequence, program_json: str) -> tirx.PrimFunc:
    """A PrimFunc ``region(*inputs, *outputs)`` calling ``icca.device.run``."""
    placeholders = [
        te.placeholder(shape, dtype, name=f"input{i}") for i, (shape, dtype) in enumerate(inputs)
    ]
    results = te.extern(
        [shape for shape, _ in outputs],
        placeholders,
        lambda ins, outs: tirx.call_packed(DEVICE_RUN_FUNC, program_json, *ins, *outs),
        name=f"{region}_device_run",
        dtype=[dtype for _, dtype in outputs],
    )
    results = results if isinstance(results, list) else [results]
    return te.create_prim_func([*placeholders, *results]).with_attr("global_symbol", region)


def _host_target() -> tvm.target.Target:
    # Stubs run on the host: reuse the host target being compiled for (it is llvm for the
    # "icca" tags), so the stubs link with the rest of the executable; fall back to llvm.
    target = tvm.target.Target.current(allow_none=True)
    if target is not None and target.kind.name == "llvm":
        return target
    if target is not None and target.host is not None and target.host.kind.name == "llvm":
        return target.host
    return tvm.target.Target("llvm")


def build_device_stubs(programs: dict[str, tuple[relax.Function, DeviceProgram]]) -> tvm.runtime.Module:
    """One LLVM module with a stub per region (name -> (region function, its program))."""
    # Every program carries a digest of the whole module so the device can tell where one
    # model invocation ends and another model's begins (run statistics).
    digest = hashlib.sha1()
    for region in sorted(programs):
        digest.update(programs[region][1].to_json().encode())
    module_id = digest.hexdigest()[:16]
    stubs = {}
    for region, (func, program) in programs.items():
        program = dataclasses.replace(program, module=module_id)
        inputs, outputs = _region_signature(func, region)
        if len(program.inputs) != len(inputs) or len(program.outputs) != len(outputs):
            raise IccaError(
                f"device program of region '{region}' has {len(program.inputs)} input(s) and "
                f"{len(program.outputs)} output(s), but the region has {len(inputs)} and "
                f"{len(outputs)}"
            )
        stubs[region] = _device_stub(region, inputs, outputs, program.to_json())
    return tvm.tirx.build(tvm.IRModule(stubs), target=_host_target())


def icca_codegen(
    functions: Sequence[relax.Function], options: Any, constant_names: Any
) -> list[tvm.runtime.Module]:
    """``relax.ext.icca``: compile the ICCA regions of a module (see the module docstring).

    ``options`` (from ``RunCodegen(target_options={"icca": ...})``) and ``constant_names`` are
    unused: the chip comes with each region, and weights reach regions as parameters since
    :func:`~tvm_icca.partition.partition_for_icca` does not bind constants.
    """
    del options, constant_names
    try:
        programs = {}
        for func in functions:
            region = str(func.attrs["global_symbol"])
            hw = region_hardware(func) or current_hardware()
            _region_signature(func, region)  # reject dynamic shapes before compiling
            programs[region] = (func, compile_region_program(func, region, hw))
        return [build_device_stubs(programs)] if programs else []
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
