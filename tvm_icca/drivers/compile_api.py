"""One-call compilation: ``tvm_icca.compile`` and ``tvm_icca.compile_onnx``.

Thin entry points over ``tvm.compile(mod, target="icca")`` with the model-level choices of
:class:`~tvm_icca.model_pass.CompileOptions`; the chip is resolved here, once
(:func:`tvm_icca.use_hardware`), and passed down by the pipeline.
"""

from __future__ import annotations

from typing import Collection, Mapping, Sequence

import tvm
from tvm.ir import IRModule

from tvm_icca.backend.target import TARGET_TAG, check_target_name, icca_pipeline
from tvm_icca.frontend.onnx_loader import ModelSource, load_onnx
from tvm_icca.hardware_choice import HardwareLike, use_hardware
from tvm_icca.model_pass import CompileOptions
from tvm_icca.model_pass.plan_cache import PlanCache
from tvm_icca.progress import ProgressLike

# ``compile`` shadows the builtin on purpose (``tvm_icca.compile``); star imports skip it.
__all__ = ["compile_onnx"]


def compile(  # pylint: disable=redefined-builtin
    mod: IRModule,
    hw: HardwareLike | None = None,
    *,
    target: str = TARGET_TAG,
    execution: str = "t10",
    state: str | None = None,
    resident: Collection[str] | None = None,
    preload: str | None = None,
    jobs: int | None = None,
    progress: ProgressLike = None,
    plan_cache: PlanCache | None = None,
) -> tvm.runtime.Executable:
    """Compile a Relax model for an ICCA chip: ``tvm.compile(mod, target="icca")`` with choices.

    Example::

        ex = tvm_icca.compile(mod, "ipu-pod4-hbm", preload="elk-dyn")
        vm = tvm.relax.VirtualMachine(ex, tvm.cpu())
        out = vm["main"](*inputs)

    The model-level choices are those of :class:`~tvm_icca.model_pass.CompileOptions`, where
    each is defined; ``tvm.compile(mod, target="icca")`` takes the defaults (or
    ``relax_pipeline=icca_pipeline(options=CompileOptions(...))``).

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module whose entry is ``main`` (e.g. from :func:`tvm_icca.load_onnx`).
    hw : HardwareSpec, preset name or dict, optional
        The chip; defaults to the current choice (:func:`tvm_icca.use_hardware`).
    target : str
        ``"icca"`` or a preset tag ``"icca-<preset>"`` (which must agree with ``hw``).
    execution : str
        ``"t10"`` (compute-shift) or ``"vgm"`` (load-compute-store baseline, T10 §2.2).
    state : str or None
        Where weights and KV caches live: ``"chip"``, ``"hbm"``, ``"host"``, or
        ``None``/``"auto"`` to decide from the chip and the model.
    resident : collection of str, optional
        Names of ``main`` parameters that are model state.
    preload : str or None
        The HBM preload design (Elk §6.1): one of :data:`~tvm_icca.PRELOAD_DESIGNS` or
        ``"off"``; ``None``: ``"elk-full"`` on a chip with HBM.
    jobs : int or None
        Worker processes for the operators' plan searches; ``None``: every CPU this process
        may use, ``1``: none (nothing is forked).
    progress : Progress, bool or None
        How the long phases (planning the operators, Elk's preload schedule) report on
        standard error: ``None`` or ``True``, a bar on a terminal once a phase has run two
        seconds; ``False``, never; a :class:`tvm_icca.progress.Progress` sets the stream and
        the delay.
    plan_cache : tvm_icca.PlanCache, optional
        Share plans across calls, as :func:`tvm_icca.compile_programs` does (the same model
        for several designs, or compiled here and timed there); by default each call plans
        with a cache of its own, with ``jobs`` workers.

    Returns
    -------
    tvm.runtime.Executable
        Run it with ``tvm.relax.VirtualMachine(executable, tvm.cpu())``; the offloaded
        regions run on the simulated device (:func:`tvm_icca.last_run_stats`).

    Raises
    ------
    IccaError
        A bad chip, target or option (its subclass says which), or an operator that cannot
        be planned on the chip (:class:`~runtime_sim.contract.errors.PlanNotFoundError`).
    """
    check_target_name(target)
    options = CompileOptions(execution=execution, state=state, resident=resident,
                             preload=preload, jobs=jobs, progress=progress)
    pipeline = icca_pipeline(target, options=options, plan_cache=plan_cache)
    if hw is None:
        return tvm.compile(mod, target=target, relax_pipeline=pipeline)
    with use_hardware(hw):
        return tvm.compile(mod, target=target, relax_pipeline=pipeline)


def compile_onnx(
    source: ModelSource,
    shape_dict: Mapping[str, Sequence[int]] | None = None,
    hw: HardwareLike | None = None,
    *,
    target: str = TARGET_TAG,
) -> tvm.runtime.Executable:
    """Load an ONNX model and compile it for an ICCA chip: :func:`load_onnx` then :func:`compile`.

    Parameters
    ----------
    source : path, bytes or onnx.ModelProto
        The model.
    shape_dict : dict, optional
        Input name -> static shape, for models with symbolic input dimensions
        (:func:`~tvm_icca.frontend.onnx_loader.load_onnx`).
    hw : HardwareSpec, preset name or dict, optional
        The chip; defaults to the current choice (:func:`tvm_icca.use_hardware`).
    target : str
        ``"icca"`` or a preset tag ``"icca-<preset>"``.

    Returns
    -------
    tvm.runtime.Executable
        Run it with ``tvm.relax.VirtualMachine(executable, tvm.cpu())``.

    Raises
    ------
    ModelImportError
        The model cannot be read or imported (:func:`~tvm_icca.frontend.onnx_loader.load_onnx`).
    IccaError
        As :func:`compile` raises.
    """
    return compile(load_onnx(source, shape_dict), hw, target=target)
