"""One-call compilation: ``tvm_icca.compile`` and ``tvm_icca.compile_onnx``.

Thin entry points over ``tvm.compile(mod, target="icca")`` with the model-level choices of
:class:`~tvm_icca.planning.CompileOptions`; the chip is resolved here, once
(:func:`tvm_icca.use_hardware`), and passed down by the pipeline.
"""

from __future__ import annotations

from typing import Collection, Mapping, Sequence

import tvm
from tvm.ir import IRModule

from tvm_icca.backend.target import TARGET_TAG, check_target_name, icca_pipeline
from tvm_icca.frontend.onnx_loader import ModelSource, load_onnx
from tvm_icca.hardware_choice import HardwareLike, use_hardware
from tvm_icca.planning import CompileOptions
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
    progress: ProgressLike = None,
) -> tvm.runtime.Executable:
    """``tvm.compile(mod, target="icca")`` for the chip ``hw`` (default: the current choice),
    with the model-level choices of :class:`~tvm_icca.planning.CompileOptions` (``execution``
    ``"t10"`` or ``"vgm"``, ``state``: where weights and KV caches live, ``"chip"``, ``"hbm"``,
    ``"host"`` or ``None``/``"auto"`` (HBM on a chip with HBM, else on chip when the model fits,
    else the host), ``resident`` parameter names, ``preload``: the
    HBM preload design, default ``"elk-full"`` on a chip with HBM).

    ``progress``: how the long phases (planning the operators, Elk's preload schedule) report
    on standard error; by default (``None`` or ``True``) a bar on a terminal once a phase has
    run two seconds, nothing otherwise; ``False``: never; a
    :class:`tvm_icca.progress.Progress` sets the stream and the delay. ``tvm.compile(mod,
    target="icca")`` shows the same default bars; ``relax_pipeline=icca_pipeline(options=
    CompileOptions(progress=False))`` turns them off there.

    Run the result with ``tvm.relax.VirtualMachine(executable, tvm.cpu())``.
    """
    check_target_name(target)
    options = CompileOptions(execution=execution, state=state, resident=resident,
                             preload=preload, progress=progress)
    pipeline = icca_pipeline(target, options=options)
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
    """:func:`load_onnx` then :func:`compile`."""
    return compile(load_onnx(source, shape_dict), hw, target=target)
