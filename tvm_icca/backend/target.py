"""The ``icca`` target and the ICCA compilation pipeline.

Target kinds are C++-only in TVM 0.27, so ICCA is an ``llvm`` target with the extra key
``"icca"``, registered as target tags:

* ``Target("icca")`` -- ``{"kind": "llvm", "keys": ["icca", "cpu"]}``; the chip is the one
  chosen with :func:`tvm_icca.use_hardware`, else ``ipu-mk2``;
* ``Target("icca-<preset>")`` for every preset (``icca-ipu-pod4``, ...), which also sets the
  target's ``model`` attribute to the preset name.

``tvm.compile(mod, target="icca")`` runs :func:`icca_pipeline`: partition for the chip (unless
the module is already partitioned), the model-level planning pass
(:func:`tvm_icca.model_pass.plan_device_programs`, the same passes the timing-only path runs),
``RunCodegen`` (whose ``relax.ext.icca`` serializes the programs into stubs), then the usual
CPU pipeline for what stays on the host. See :func:`_install_pipeline_hook` for how the
default pipeline is routed there.
"""

from __future__ import annotations

import difflib
from typing import Any, Callable

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.target import Target

from runtime_sim.contract.errors import IccaError, InvalidHardwareSpecError
from tvm_icca.backend.input_check import check_inputs_pass
from tvm_icca.ffi_errors import raise_through_ffi
from tvm_icca.hardware_choice import (
    PRESET_NAMES,
    HardwareLike,
    HardwareSpec,
    current_hardware,
    explicit_hardware,
    preset,
    resolve_hardware,
)
from tvm_icca.model_pass import CompileOptions, icca_model_passes
from tvm_icca.model_pass.plan_cache import PlanCache

__all__ = [
    "ICCA_KEY",
    "TARGET_TAG",
    "check_target_name",
    "icca_tags",
    "hardware_for_target",
    "icca_pipeline",
    "is_icca_target",
    "offload_to_icca",
    "preset_tag",
    "register_targets",
]

#: Target key that marks a target as ICCA (the kind stays llvm: the host runs the stubs).
ICCA_KEY = "icca"
#: Tag of the generic ICCA target.
TARGET_TAG = "icca"


def preset_tag(preset_name: str) -> str:
    """Target tag of a hardware preset: ``icca-ipu-pod4`` for ``ipu-pod4``."""
    return f"{TARGET_TAG}-{preset_name}"


def register_targets() -> None:
    """Register the ``icca`` and ``icca-<preset>`` target tags (idempotent)."""
    base = {"kind": "llvm", "keys": [ICCA_KEY, "cpu"]}
    tvm.target.tag.register_tag(TARGET_TAG, dict(base), override=True)
    for name in PRESET_NAMES:
        tvm.target.tag.register_tag(preset_tag(name), {**base, "model": name}, override=True)


def icca_tags() -> list[str]:
    """Every ICCA target tag: ``icca`` and ``icca-<preset>`` per hardware preset."""
    return [TARGET_TAG] + [preset_tag(name) for name in PRESET_NAMES]


def check_target_name(target: Any) -> None:
    """Refuse a target string that reads as an ICCA tag but is none (``icca-ipu-mk3``) with
    the known tags and a "did you mean", before TVM's generic "target kind not found"."""
    if not isinstance(target, str):
        return
    name = target.split()[0] if target.strip() else target
    if not name.lower().startswith(TARGET_TAG) or name in icca_tags():
        return
    if name.lower() in icca_tags():  # tags are case-sensitive in TVM; presets are not here
        raise InvalidHardwareSpecError(f"unknown target '{name}'; did you mean '{name.lower()}'?")
    close = difflib.get_close_matches(name.lower(), icca_tags(), n=1, cutoff=0.6)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise InvalidHardwareSpecError(f"unknown ICCA target '{name}'; {hint}known tags: "
                                   f"{', '.join(icca_tags())}")


def _as_target(target: Any) -> Target | None:
    if target is None or isinstance(target, Target):
        return target
    check_target_name(target)
    return Target(target)


def is_icca_target(target: Target | str | dict | None) -> bool:
    """Whether ``target`` compiles for ICCA (its keys contain ``"icca"``).

    Parameters
    ----------
    target : tvm.target.Target, str, dict or None
        A target, a target tag (``"icca"``, ``"icca-ipu-pod4"``, ``"llvm"``) or a target
        config; ``None`` is no target.

    Returns
    -------
    bool
        True for the ``icca`` and ``icca-<preset>`` tags and any target with the ``icca`` key.

    Raises
    ------
    InvalidHardwareSpecError
        An ``icca-*`` tag that names no preset (the message lists the known tags).
    """
    target = _as_target(target)
    return target is not None and ICCA_KEY in list(target.keys)


def hardware_for_target(target: Target | str | dict | None = None) -> HardwareSpec:
    """The chip a target compiles for.

    A preset tag (``icca-ipu-pod4``) names its chip; :func:`tvm_icca.use_hardware` may refine
    it with a spec of the same name (e.g. a preset with overridden link bandwidth), but naming
    a different chip is an error rather than a silent choice. Without a preset in the target,
    the :func:`~tvm_icca.use_hardware` choice or the default preset is used.

    Parameters
    ----------
    target : tvm.target.Target, str, dict or None
        The target (or its tag or config); ``None``: the current target
        (``Target.current()``), if any.

    Returns
    -------
    HardwareSpec
        The chip compiled for.

    Raises
    ------
    InvalidHardwareSpecError
        The target's model is not a preset, or :func:`~tvm_icca.use_hardware` chose a
        different chip than the target's tag names.
    """
    target = _as_target(target) if target is not None else Target.current(allow_none=True)
    explicit = explicit_hardware()
    model = str(target.attrs.get("model", "")) if target is not None and is_icca_target(target) else ""
    if not model:
        return explicit if explicit is not None else current_hardware()
    if model not in PRESET_NAMES:
        raise InvalidHardwareSpecError(
            f"target model '{model}' is not an ICCA hardware preset; known presets: "
            f"{', '.join(PRESET_NAMES)}"
        )
    if explicit is not None and explicit.name != model:
        raise InvalidHardwareSpecError(
            f"target '{preset_tag(model)}' compiles for '{model}' but use_hardware() chose "
            f"'{explicit.name}'; use target 'icca' to compile for the use_hardware() chip"
        )
    return explicit if explicit is not None else preset(model)


def offload_to_icca(
    hw: HardwareLike | None = None, options: CompileOptions | None = None, *,
    plan_cache: PlanCache | None = None,
) -> tvm.transform.Pass:
    """The offload pass: partition for ICCA, plan the whole model's device programs, run codegen.

    Partitioning (:func:`~tvm_icca.partition.partitioner.partition_for_icca`) is skipped for a
    module already partitioned; planning is :func:`~tvm_icca.model_pass.plan_device_programs`
    (through :func:`~tvm_icca.model_pass.icca_model_passes`); ``relax.transform.RunCodegen``
    then replaces every region by a call of its device stub (:func:`icca_codegen`).

    Parameters
    ----------
    hw : HardwareSpec, preset name or dict, optional
        The chip; defaults to the one of the current target (:func:`hardware_for_target`).
    options : CompileOptions, optional
        The model-level choices (:class:`~tvm_icca.model_pass.CompileOptions`); defaults to
        ``CompileOptions()``.
    plan_cache : PlanCache, optional
        Plans shared with other compilations (:func:`~tvm_icca.model_pass.plan_device_programs`);
        by default the planning pass makes its own.

    Returns
    -------
    tvm.transform.Pass
        A module pass; errors keep their tvm_icca class when it runs inside ``tvm.compile``.
    """

    @tvm.transform.module_pass(opt_level=0, name="IccaOffload")
    def _offload(mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        try:
            spec = resolve_hardware(hw) if hw is not None else hardware_for_target(None)
            mod = icca_model_passes(spec, options, plan_cache=plan_cache)(mod)
            return relax.transform.RunCodegen()(mod)
        except IccaError as err:
            # This pass is called from C++ (Sequential, tvm.compile): keep the error intact.
            raise_through_ffi(err)
            raise

    return _offload


def icca_pipeline(
    target: Target | str | dict | None = None,
    hw: HardwareLike | None = None,
    base: tvm.transform.Pass | None = None,
    options: CompileOptions | None = None,
    *,
    plan_cache: PlanCache | None = None,
) -> tvm.transform.Pass:
    """The Relax pipeline for ICCA: :func:`offload_to_icca`, then the host pipeline ``base``.

    Example: ``tvm.compile(mod, target="icca", relax_pipeline=icca_pipeline(
    options=CompileOptions(state="chip")))``. Also registered as the named pipeline ``"icca"``,
    so ``tvm.compile(mod, target="llvm", relax_pipeline="icca")`` offloads as well. The long
    phases show bars on a terminal after two seconds (``progress`` of
    :class:`~tvm_icca.model_pass.CompileOptions`); ``options=CompileOptions(progress=False)``
    hides them. Before the host pipeline, a check of the inputs' shapes and dtypes is added
    to ``main`` (:class:`~runtime_sim.contract.errors.InputMismatchError` at call time).

    Parameters
    ----------
    target : tvm.target.Target, str, dict or None
        The target the pipeline runs under (tag or config accepted); ``None``: whatever
        target ``tvm.compile`` sets.
    hw : HardwareSpec, preset name or dict, optional
        The chip; defaults to the one of the target (:func:`hardware_for_target`).
    base : tvm.transform.Pass, optional
        The host pipeline; defaults to TVM's default build pipeline (the one ``tvm.compile``
        uses for CPU targets).
    options : CompileOptions, optional
        The model-level choices (:class:`~tvm_icca.model_pass.CompileOptions`).
    plan_cache : PlanCache, optional
        Plans shared with other compilations (:func:`offload_to_icca`).

    Returns
    -------
    tvm.transform.Pass
        The whole Relax pipeline, for ``tvm.compile(..., relax_pipeline=...)``.
    """
    target = _as_target(target)
    if base is None:
        base = _ORIGINAL_DEFAULT_BUILD()
    offload = offload_to_icca(hw, options, plan_cache=plan_cache)

    @tvm.transform.module_pass(opt_level=0, name="IccaPipeline")
    def _pipeline(mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        if target is None:
            return base(check_inputs_pass()(offload(mod)))
        with target:
            return base(check_inputs_pass()(offload(mod)))

    return _pipeline


# -- routing TVM's default pipeline to ICCA ------------------------------------------------
_ORIGINAL_DEFAULT_BUILD: Callable[..., tvm.transform.Pass] = relax.pipeline.default_build_pipeline


def _install_pipeline_hook() -> None:
    """Make TVM's *default* Relax pipeline run :func:`icca_pipeline` for ICCA targets.

    Why a patch: in TVM 0.27 ``tvm.compile(mod, target)`` with ``relax_pipeline="default"``
    takes ``relax.pipeline.PIPELINE_MAP["default"]`` for every non-GPU target (see
    ``relax/vm_build.py``), and ``relax.get_default_pipeline(target)`` dispatches on the target
    kind only (our kind is ``llvm``). Neither looks at target keys nor offers a registration
    point for out-of-tree backends (``register_pipeline`` refuses existing names). So this one
    function wraps both entries; the wrappers behave exactly as before for every target whose
    keys lack ``"icca"``. Idempotent.
    """
    pipeline = relax.pipeline
    if getattr(pipeline.get_default_pipeline, "__icca_hook__", False):
        return

    def _route_by_current_target(make_base: Callable[..., tvm.transform.Pass]):
        def make(**kwargs: Any) -> tvm.transform.Pass:
            base = make_base(**kwargs)

            @tvm.transform.module_pass(opt_level=0, name="DefaultOrIccaPipeline")
            def _pipeline(mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
                # tvm.compile runs the pipeline inside ``with target:``.
                if is_icca_target(Target.current(allow_none=True)):
                    mod = check_inputs_pass()(offload_to_icca()(mod))
                return base(mod)

            return _pipeline

        make.__icca_hook__ = True  # type: ignore[attr-defined]
        return make

    for name in ("default", "default_build"):
        original = pipeline.PIPELINE_MAP.get(name)
        if original is not None and not getattr(original, "__icca_hook__", False):
            pipeline.PIPELINE_MAP[name] = _route_by_current_target(original)

    original_get_default = pipeline.get_default_pipeline

    def get_default_pipeline(target: Target) -> tvm.transform.Pass:
        """TVM's ``get_default_pipeline``, plus ICCA offloading for ICCA targets."""
        if is_icca_target(target):
            return icca_pipeline(target=target, base=original_get_default(target))
        return original_get_default(target)

    get_default_pipeline.__icca_hook__ = True  # type: ignore[attr-defined]
    get_default_pipeline.__wrapped__ = original_get_default  # type: ignore[attr-defined]
    pipeline.get_default_pipeline = get_default_pipeline
    relax.get_default_pipeline = get_default_pipeline  # re-exported by tvm.relax


def install() -> None:
    """Register target tags, the ``"icca"`` pipeline and the default-pipeline hook."""
    register_targets()
    if "icca" not in relax.pipeline.PIPELINE_MAP:
        relax.pipeline.register_pipeline("icca")(icca_pipeline)
    _install_pipeline_hook()


install()
