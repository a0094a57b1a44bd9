"""The contract between the compiler and the device: what a program says and what it means.

Both the compiler (:mod:`tvm_icca`) and the two executors import this package; it imports
nothing else of the project and not TVM.

* Format: :mod:`.expr` (operators as tensor expressions), :mod:`.plan` (execution plans),
  :mod:`.program` (the versioned JSON device program), :mod:`.constants` (baked tensors),
  :mod:`.op_kinds` (the op kinds a program may hold);
* validation: :mod:`.validation` (the one check every executor runs), :mod:`.json_fields`;
* hardware: :mod:`.hardware` (:class:`HardwareSpec` and its validation), :mod:`.presets` (the
  named chips, each number with its source), :mod:`.hardware_files` (a chip from a JSON or
  TOML file), :mod:`.hardware_limits` (the bounds of every field), :mod:`.mesh_grid`
  (placements and the NoC grid of a mesh chip), :mod:`.field_values` (reading a field's value);
* semantics: :mod:`.layout` (what a plan means on the cores, ``OpLayout``; T10's rules on
  it: :mod:`.layout_checks`), :mod:`.relayout`
  (re-layout geometry), :mod:`.vgm_layout` (the VGM baseline's home slices and tiles),
  :mod:`.preload_chunks` (what a preload leaves on the cores, Elk §4.3), :mod:`.stream`
  (a run's preload/execute instruction stream, Elk §4.5), :mod:`.lifetimes` (tensor lifetimes);
* :mod:`.errors` -- every error type of the project.

Start reading at :mod:`.program`.
"""

# numpy has no bfloat16: importing ml_dtypes registers it, so np.dtype("bfloat16") names the
# storage of that dtype everywhere the device and the compiler hold data. Here, once, because
# importing any module of the contract runs this package first.
import ml_dtypes  # noqa: E402,F401  pylint: disable=unused-import,wrong-import-position
