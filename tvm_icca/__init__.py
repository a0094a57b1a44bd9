"""tvm_icca: a TVM backend (BYOC) for inter-core connected AI chips, run on a simulated device.

Quick start::

    import tvm, tvm_icca
    from tvm import relax

    with tvm_icca.use_hardware("ipu-mk2"):
        ex = tvm.compile(mod, target="icca")          # offloads what the chip supports
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*inputs)
    print(tvm_icca.last_run_stats())

Importing the package (which ``import tvm`` does through the ``tvm.backends`` entry point)
registers the ``icca`` / ``icca-<preset>`` target tags, the ``icca.*`` partition patterns, the
codegen ``relax.ext.icca`` and the device entry ``icca.device.run``.

Public API (``help(tvm_icca.<name>)`` documents each one):

* hardware: ``HardwareSpec``, ``preset``, ``small_chip``, ``PRESET_NAMES``,
  ``load_hardware`` (a chip from a ``.json`` / ``.toml`` file), ``use_hardware``,
  ``current_hardware``, ``hardware_for_target``;
* import and partition: ``load_onnx``, ``partition_for_icca``, ``partition_report``,
  ``format_report``, ``host_ops``, ``icca_regions``, ``get_icca_patterns``;
* compile: ``compile(mod, hw)`` (in ``__all__``, as ``re.compile`` is in ``re``'s: a star
  import shadows the builtin ``compile``; write ``tvm_icca.compile``), ``compile_onnx``, ``CompileOptions``, ``PRELOAD_DESIGNS``,
  ``icca_pipeline``, ``offload_to_icca``, ``is_icca_target``, ``plan_device_programs``,
  ``icca_codegen``, ``device_programs`` (what the pass planned);
* timing without running: ``compile_programs`` (a model or a zoo workload to device programs,
  then ``CompiledModel.simulate()``), ``PlanCache`` (plans shared by several compilations),
  ``get_workload``, ``list_workloads``, ``Workload``;
* a built library, checked before the loader sees it: ``load_library``;
* run statistics: ``last_run_stats`` (its keys: :mod:`runtime_sim.contract.metrics`),
  ``write_last_run_trace``;
* tuning: ``tune``, ``use_database``;
* errors: ``IccaError`` and its subclasses (:mod:`runtime_sim.contract.errors`).
"""

# The public API, stage by stage (the package's folders, in data-flow order). Importing these
# modules registers the "icca" target tags, the icca.* patterns, relax.ext.icca and the
# device entry icca.device.run. No submodule imports this __init__'s names (the layer rules
# of .importlinter); `import tvm` from inside re-enters it harmlessly (see _autoload.py).
from runtime_sim.contract.errors import *  # noqa: F401,F403  (every IccaError class)
from runtime_sim.contract.errors import ERROR_TYPES as _ERROR_TYPES
from tvm_icca.hardware_choice import (
    PRESET_NAMES,
    HardwareSpec,
    current_hardware,
    load_hardware,
    preset,
    small_chip,
    use_hardware,
)
from tvm_icca.frontend.onnx_loader import load_onnx
from tvm_icca.partition.patterns import get_icca_patterns
from tvm_icca.partition.partitioner import (
    format_report,
    host_ops,
    icca_regions,
    partition_for_icca,
    partition_report,
)
from tvm_icca.model_pass import PRELOAD_DESIGNS, CompileOptions, device_programs, plan_device_programs
from tvm_icca.model_pass.plan_cache import PlanCache
from tvm_icca.records.apply import use_database
from tvm_icca.backend.codegen import icca_codegen
from tvm_icca.backend.target import (
    hardware_for_target,
    icca_pipeline,
    is_icca_target,
    offload_to_icca,
)
from tvm_icca.device_call.device_entry import last_run_stats, write_last_run_trace
from tvm_icca.device_call.library import load_library
from tvm_icca.drivers.compile_api import compile, compile_onnx  # pylint: disable=redefined-builtin
from tvm_icca.tuning import tune
from tvm_icca.drivers.device_programs import CompiledModel, compile_programs
from tvm_icca.workloads import Workload, get_workload, list_workloads

__version__ = "0.1.0"

# Every public name, and only those: the names api.rst documents (tests/test_public_api.py
# and docs/_ext/api_coverage.py check both directions). pydoc and Sphinx list a package's
# functions from __all__, so help(tvm_icca) shows compile too.
__all__ = [
    "PRELOAD_DESIGNS",
    "PRESET_NAMES",
    "CompileOptions",
    "CompiledModel",
    "HardwareSpec",
    "PlanCache",
    "Workload",
    "compile",
    "compile_onnx",
    "compile_programs",
    "current_hardware",
    "device_programs",
    "format_report",
    "get_icca_patterns",
    "get_workload",
    "hardware_for_target",
    "host_ops",
    "icca_codegen",
    "icca_pipeline",
    "icca_regions",
    "is_icca_target",
    "last_run_stats",
    "list_workloads",
    "load_hardware",
    "load_library",
    "load_onnx",
    "offload_to_icca",
    "partition_for_icca",
    "partition_report",
    "plan_device_programs",
    "preset",
    "small_chip",
    "tune",
    "use_database",
    "use_hardware",
    "write_last_run_trace",
    *sorted(_ERROR_TYPES),
]
