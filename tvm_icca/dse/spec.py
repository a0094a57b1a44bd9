"""The spec of a design-space exploration: which chips, workloads and preload designs to time.

A spec is a TOML or YAML file (:func:`load_spec`) or a mapping (:meth:`DseSpec.from_dict`)::

    name = "hbm-sweep"
    designs = ["static", "elk-full"]        # preload designs (Elk §6.1); "off" too
    state = "hbm"                           # optional: where weights and KV caches live
    results = "hbm-sweep.jsonl"             # optional: default <spec stem>.jsonl beside it

    [hardware]                              # the base chip and its fixed fields
    base = "ipu-pod4-hbm"                   # a preset or a .json/.toml hardware file
    sync_cycles = 200

    [grid]                                  # HardwareSpec field -> values (Cartesian product)
    hbm_bandwidth = [4e12, 8e12, 16e12]
    topology = ["all-to-all", "mesh"]

    [[points]]                              # optional: explicit chips beside the grid
    hbm_bandwidth = 32e12
    link_bandwidth = 11e9

    [[workloads]]                           # zoo names with get_workload's arguments
    name = "llama2-13b"
    batch = 32
    context = [2048, 4096]                  # a list is one more axis

    [[workloads]]
    name = "model.onnx"                     # an ONNX file, beside the spec
    shape = { input = [1, 3, 224, 224] }

    gpus = ["a100", "h100"]                 # optional: GPU reference points, one per workload
                                            # (tvm_icca.dse.gpu_points)

Everything is checked when the spec is loaded (every grid value, every chip of the product,
every workload's arguments), and every problem is one
:class:`~runtime_sim.contract.errors.InvalidSpecError` naming the file and the key.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import json
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from runtime_sim.contract.errors import IccaError, InvalidSpecError
from runtime_sim.contract.text_files import parse_toml, read_text
from tvm_icca.dse.gpu_points import check_gpus
from tvm_icca.hardware_choice import HardwareSpec, is_hardware_file_name, load_hardware, preset
from tvm_icca.model_pass.planner import PRELOAD_CHOICES
from tvm_icca.model_pass.region_plans import EXECUTION_MODELS
from tvm_icca.model_pass.state_place import STATE_CHOICES


__all__ = ["DseSpec", "SPEC_KEYS", "SPEC_SUFFIXES", "load_spec", "hardware_fields"]

#: The keys of a spec, in the order the documentation describes them.
SPEC_KEYS = ("name", "description", "hardware", "grid", "points", "workloads", "designs",
             "state", "execution", "results", "gpus")
#: File formats :func:`load_spec` reads, by suffix.
SPEC_SUFFIXES = (".toml", ".yaml", ".yml")
#: The preload design of a spec that names none: Elk's full design (Elk §6.1).
DEFAULT_DESIGNS = ("elk-full",)
#: Keys of a workload entry that are not ``get_workload`` arguments.
_ONNX_SUFFIX = ".onnx"


def hardware_fields() -> list[str]:
    """Every :class:`HardwareSpec` field a spec may set (``name`` and ``notes`` excluded)."""
    return [f.name for f in dataclasses.fields(HardwareSpec) if f.name not in ("name", "notes")]


@dataclass(frozen=True)
class DseSpec:
    """A design-space exploration: a base chip, its swept fields, workloads and designs.

    Build it with :func:`load_spec` (a file) or :meth:`from_dict` (a mapping); both check every
    field. :func:`tvm_icca.dse.points.expand` turns it into points.

    Parameters
    ----------
    name : str
        The study's name (default: the spec file's stem).
    source : str
        Where it was read from (a path, or ``"<dict>"``), for messages.
    hardware : HardwareSpec
        The base chip with the spec's fixed fields applied.
    fixed : dict
        The fixed fields as set by the spec (after :class:`HardwareSpec`'s conversion).
    grid : dict
        HardwareSpec field -> tuple of values; the points are their Cartesian product.
    points : tuple of dict
        Explicit chips (HardwareSpec field -> value), on top of the grid's.
    workloads : tuple of dict
        One mapping per workload instance: ``workload`` (a zoo name or an ONNX path) and its
        arguments (``batch``, ``context``, ..., ``shape`` for ONNX), list values expanded.
    designs : tuple of str
        Preload designs (:data:`tvm_icca.PRELOAD_DESIGNS` or ``"off"``).
    state : str or None
        Where weights and KV caches live (``None``: decided per chip and model).
    execution : str
        ``"t10"`` or ``"vgm"`` (:class:`tvm_icca.CompileOptions`).
    results : str
        The JSON-lines results file.
    description : str
        Free text about the study.
    gpus : tuple of str
        GPU presets priced as reference points, one per workload
        (:mod:`tvm_icca.dse.gpu_points`).
    """

    name: str
    source: str
    hardware: HardwareSpec
    fixed: dict[str, Any]
    grid: dict[str, tuple[Any, ...]]
    points: tuple[dict[str, Any], ...]
    workloads: tuple[dict[str, Any], ...]
    designs: tuple[str, ...] = DEFAULT_DESIGNS
    state: str | None = None
    execution: str = "t10"
    results: str = "dse.jsonl"
    description: str = ""
    gpus: tuple[str, ...] = ()

    @property
    def axes(self) -> list[str]:
        """The HardwareSpec fields that vary between points: the grid's, then the points'."""
        names = list(self.grid)
        for point in self.points:
            names.extend(k for k in point if k not in names)
        return names

    def hardware_points(self) -> list[dict[str, Any]]:
        """The overrides of every chip of the study, in order: the grid's product, then the
        explicit points (a chip given twice is kept once)."""
        out: list[dict[str, Any]] = []
        seen: set[str] = set()
        combos = ([dict(zip(self.grid, values)) for values in itertools.product(*self.grid.values())]
                  if self.grid else [])
        if not combos and not self.points:
            combos = [{}]  # no axis: the base chip alone
        for overrides in [*combos, *self.points]:
            canon = json.dumps(overrides, sort_keys=True, default=list)
            if canon not in seen:
                seen.add(canon)
                out.append(overrides)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<dict>",
                  base_dir: str | None = None, default_name: str = "dse",
                  default_results: str | None = None) -> "DseSpec":
        """Check a spec given as a mapping (what a TOML or YAML file holds).

        Parameters
        ----------
        data : Mapping
            The spec's keys (:data:`SPEC_KEYS`).
        source : str
            The file it came from, named in every error.
        base_dir : str, optional
            The directory relative paths (hardware files, ONNX files, ``results``) are under;
            default: the current directory.
        default_name : str
            ``name`` when the spec gives none.
        default_results : str, optional
            ``results`` when the spec gives none (default: ``<name>.jsonl`` in ``base_dir``).

        Returns
        -------
        DseSpec
            The checked spec.

        Raises
        ------
        InvalidSpecError
            Any key or value that cannot be used (the message names ``source`` and the key).
        """
        return _Parser(source, base_dir or os.getcwd()).spec(data, default_name, default_results)


def load_spec(path: "str | os.PathLike[str]") -> DseSpec:
    """Read and check a design-space exploration spec from a TOML or YAML file.

    YAML needs PyYAML (``pip install tvm-icca[dse]``). Paths inside the spec (a hardware
    file, ONNX files, ``results``) are relative to the spec's directory; ``results``
    defaults to ``<spec stem>.jsonl`` beside the spec, ``name`` to the stem. The format is
    described in :mod:`tvm_icca.dse.spec` and the documentation's DSE page.

    Parameters
    ----------
    path : str or os.PathLike
        The spec; ``.toml``, ``.yaml`` or ``.yml``.

    Returns
    -------
    DseSpec
        The checked spec.

    Raises
    ------
    InvalidSpecError
        The file cannot be read or parsed (with the line), or any key or value is unusable:
        one error naming the file and the key.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidSpecError(f"a DSE spec is a path (str or os.PathLike), not {type(path).__name__}")
    where = os.fspath(path)

    def bad(why: str) -> InvalidSpecError:
        return InvalidSpecError(f"DSE spec '{where}': {why}")

    suffix = os.path.splitext(where)[1].lower()
    if suffix not in SPEC_SUFFIXES:
        raise bad(f"unknown format '{suffix or '(no suffix)'}'; a spec ends in {', '.join(SPEC_SUFFIXES)}")
    text = read_text(where, bad)
    data = parse_toml(text, bad) if suffix == ".toml" else _load_yaml(text, bad)
    if not isinstance(data, dict):
        raise bad(f"must hold one mapping of keys, not a {type(data).__name__}")
    directory = os.path.dirname(os.path.abspath(where))
    stem = os.path.splitext(os.path.basename(where))[0]
    return DseSpec.from_dict(data, source=where, base_dir=directory, default_name=stem,
                             default_results=os.path.join(directory, f"{stem}.jsonl"))


def _load_yaml(text: str, bad: Any) -> Any:
    try:
        import yaml  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise bad("reading YAML needs PyYAML: pip install 'tvm-icca[dse]' (or write the spec "
                  "in TOML)") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise bad(f"invalid YAML{where}: {problem}") from None


class _Parser:
    """Checks a spec mapping key by key; every error names the source and the key."""

    def __init__(self, source: str, base_dir: str) -> None:
        self.source = source
        self.base_dir = base_dir

    def bad(self, key: str, why: str) -> InvalidSpecError:
        return InvalidSpecError(f"DSE spec '{self.source}': {key}: {why}")

    def unknown(self, key: str, got: str, known: Sequence[str], what: str) -> InvalidSpecError:
        close = difflib.get_close_matches(got, list(known), n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'? " if close else ""
        return self.bad(key, f"unknown {what} '{got}'; {hint}known: {', '.join(known)}")

    def path(self, text: str) -> str:
        return text if os.path.isabs(text) else os.path.join(self.base_dir, text)

    # -- the whole spec ---------------------------------------------------------------
    def spec(self, data: Mapping[str, Any], default_name: str,
             default_results: str | None) -> DseSpec:
        if not isinstance(data, Mapping):
            raise InvalidSpecError(f"DSE spec '{self.source}': must be a mapping of keys, "
                                   f"not a {type(data).__name__}")
        for key in data:
            if key not in SPEC_KEYS:
                raise self.unknown(str(key), str(key), SPEC_KEYS, "key")
        name = self.text(data, "name", default_name)
        description = self.text(data, "description", "")
        base, fixed = self.hardware(data.get("hardware"))
        grid = self.grid(base, data.get("grid", _ABSENT))
        points = self.points(base, data.get("points", ()))
        workloads = self.workloads(data.get("workloads", _ABSENT))
        designs = self.designs(data.get("designs", list(DEFAULT_DESIGNS)))
        state = self.choice(data, "state", STATE_CHOICES, None)
        execution = self.choice(data, "execution", EXECUTION_MODELS, "t10")
        results = data.get("results")
        if results is None:
            results = default_results or os.path.join(self.base_dir, f"{name}.jsonl")
        elif not isinstance(results, str) or not results.strip():
            raise self.bad("results", f"must be a file path, not {results!r}")
        else:
            results = self.path(results)
        spec = DseSpec(name=name, source=self.source, hardware=base, fixed=fixed, grid=grid,
                       points=points, workloads=workloads, designs=designs,
                       state=None if state == "auto" else state, execution=execution,
                       results=results, description=description,
                       gpus=check_gpus(data.get("gpus"), self.bad))
        self.check_chips(spec)
        return spec

    def text(self, data: Mapping[str, Any], key: str, default: str) -> str:
        value = data.get(key, default)
        if not isinstance(value, str) or (key == "name" and not value.strip()):
            raise self.bad(key, f"must be a non-empty string, not {value!r}")
        return value

    def choice(self, data: Mapping[str, Any], key: str, choices: Sequence[str],
               default: str | None) -> str | None:
        value = data.get(key, default)
        if value is None:
            return None
        if not isinstance(value, str) or value not in choices:
            raise self.unknown(key, str(value), choices, key)
        return value

    # -- the chip ---------------------------------------------------------------------
    def hardware(self, value: Any) -> tuple[HardwareSpec, dict[str, Any]]:
        if value is None:
            raise self.bad("hardware", "missing: name the base chip, e.g. hardware = "
                           "\"ipu-pod4-hbm\" or a [hardware] table with base = \"<preset or "
                           "file>\" and fixed fields")
        if isinstance(value, str):
            value = {"base": value}
        if not isinstance(value, Mapping):
            raise self.bad("hardware", f"must be a preset name, a hardware file or a table, "
                           f"not {type(value).__name__}")
        fields = dict(value)
        base_ref = fields.pop("base", None)
        known = hardware_fields()
        for key in fields:
            if key not in known and key != "name":
                raise self.unknown(f"hardware.{key}", str(key), ["base", "name", *known],
                                   "HardwareSpec field")
        try:
            if base_ref is None:
                spec = HardwareSpec.from_dict({"name": "chip", **fields})
                return spec, {}
            if not isinstance(base_ref, str):
                raise self.bad("hardware.base", f"must be a preset name or a hardware file, "
                               f"not {base_ref!r}")
            base = (load_hardware(self.path(base_ref)) if is_hardware_file_name(base_ref)
                    else preset(base_ref))
            spec = base.with_overrides(**fields) if fields else base
        except InvalidSpecError:
            raise
        except IccaError as err:
            raise self.bad("hardware", str(err)) from None
        return spec, {k: field_json(spec, k) for k in fields if k != "name"}

    def grid(self, base: HardwareSpec, value: Any) -> dict[str, tuple[Any, ...]]:
        if value is _ABSENT:
            return {}
        if not isinstance(value, Mapping):
            raise self.bad("grid", f"must be a table of HardwareSpec field -> list of values, "
                           f"not {type(value).__name__}")
        if not value:
            raise self.bad("grid", "is empty: give at least one HardwareSpec field and its "
                           "values, or leave the grid out")
        grid: dict[str, tuple[Any, ...]] = {}
        for name, values in value.items():
            key = f"grid.{name}"
            self.field_name(key, name)
            if not isinstance(values, (list, tuple)):
                values = [values]
            if not values:
                raise self.bad(key, "has no values")
            converted = [self.field_value(f"{key}[{i}]", base, name, v) for i, v in enumerate(values)]
            if len({json.dumps(v, sort_keys=True) for v in converted}) < len(converted):
                raise self.bad(key, f"gives a value twice: {list(values)!r}")
            grid[name] = tuple(converted)
        return grid

    def points(self, base: HardwareSpec, value: Any) -> tuple[dict[str, Any], ...]:
        if not isinstance(value, (list, tuple)):
            raise self.bad("points", f"must be a list of tables (HardwareSpec field -> value), "
                           f"not {type(value).__name__}")
        points = []
        for i, point in enumerate(value):
            key = f"points[{i}]"
            if not isinstance(point, Mapping) or not point:
                raise self.bad(key, "must be a non-empty table of HardwareSpec field -> value")
            converted = {}
            for name, v in point.items():
                self.field_name(f"{key}.{name}", name)
                converted[name] = self.field_value(f"{key}.{name}", base, name, v)
            points.append(converted)
        return tuple(points)

    def field_name(self, key: str, name: Any) -> None:
        known = hardware_fields()
        if name not in known:
            raise self.unknown(key, str(name), known, "HardwareSpec field")

    def field_value(self, key: str, base: HardwareSpec, name: str, value: Any) -> Any:
        """``value`` as the spec stores it (converted and checked on the base chip)."""
        try:
            return field_json(base.with_overrides(**{name: value}), name)
        except IccaError as err:
            raise self.bad(key, f"{value!r} is not a usable value: {err}") from None

    def check_chips(self, spec: DseSpec) -> None:
        """Every chip of the study must be a valid HardwareSpec (a combination of valid values
        may not be: cores that do not divide into the chips, HBM bandwidth without controllers)."""
        for overrides in spec.hardware_points():
            try:
                spec.hardware.with_overrides(**overrides)
            except IccaError as err:
                shown = ", ".join(f"{k}={v!r}" for k, v in overrides.items())
                raise self.bad("grid/points", f"the chip {shown} is impossible: {err}") from None

    # -- workloads and designs ------------------------------------------------------------
    def workloads(self, value: Any) -> tuple[dict[str, Any], ...]:
        if value is _ABSENT:
            raise self.bad("workloads", "missing: list at least one workload (a zoo name, see "
                           "`tvm-icca models`, or an ONNX file)")
        if isinstance(value, (str, Mapping)):
            value = [value]
        if not isinstance(value, (list, tuple)) or not value:
            raise self.bad("workloads", "must be a non-empty list of workloads")
        out: list[dict[str, Any]] = []
        for i, entry in enumerate(value):
            for instance in self.workload(f"workloads[{i}]", entry):
                if instance not in out:
                    out.append(instance)
        return tuple(out)

    def workload(self, key: str, entry: Any) -> list[dict[str, Any]]:
        from tvm_icca.workloads import canonical_name, get_workload  # pylint: disable=import-outside-toplevel

        if isinstance(entry, str):
            entry = {"name": entry}
        if not isinstance(entry, Mapping):
            raise self.bad(key, f"must be a workload name or a table with 'name', not {entry!r}")
        args = dict(entry)
        name = args.pop("name", None)
        if not isinstance(name, str) or not name.strip():
            raise self.bad(f"{key}.name", "missing: a zoo workload name or the path of an ONNX file")
        if name.lower().endswith(_ONNX_SUFFIX):
            extra = sorted(set(args) - {"shape"})
            if extra:
                raise self.bad(f"{key}.{extra[0]}", "an ONNX workload takes only 'shape' "
                               "(input name -> list of dimensions)")
            shape = args.get("shape")
            if shape is not None and (not isinstance(shape, Mapping) or not all(
                    isinstance(d, list) and all(isinstance(x, int) and x > 0 for x in d)
                    for d in shape.values())):
                raise self.bad(f"{key}.shape", "must be a table input name -> list of "
                               f"positive integers, not {shape!r}")
            if not os.path.isfile(self.path(name)):
                raise self.bad(f"{key}.name", f"no such ONNX file '{self.path(name)}'")
            return [{"workload": name, **({"shape": dict(shape)} if shape else {})}]
        try:
            canonical = canonical_name(name)
        except IccaError:
            from tvm_icca.workloads import list_workloads  # pylint: disable=import-outside-toplevel
            raise self.unknown(f"{key}.name", name, list_workloads(), "workload") from None
        axes = {k: v for k, v in args.items() if isinstance(v, (list, tuple))}
        for k, v in axes.items():
            if not v:
                raise self.bad(f"{key}.{k}", "has no values")
        instances = []
        for values in itertools.product(*axes.values()):
            instance = {**args, **dict(zip(axes, values))}
            try:
                get_workload(canonical, **instance)  # shapes only: a fraction of a second
            except IccaError as err:
                raise self.bad(key, f"{canonical} with {instance}: {err}") from None
            instances.append({"workload": canonical, **instance})
        return instances

    def designs(self, value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)) or not value:
            raise self.bad("designs", f"must be a non-empty list of preload designs "
                           f"({', '.join(PRELOAD_CHOICES)})")
        for i, design in enumerate(value):
            if not isinstance(design, str) or design not in PRELOAD_CHOICES:
                raise self.unknown(f"designs[{i}]", str(design), PRELOAD_CHOICES, "design")
        if len(set(value)) < len(value):
            raise self.bad("designs", f"names a design twice: {list(value)}")
        return tuple(value)


_ABSENT = object()


def _jsonable(value: Any) -> Any:
    """A HardwareSpec field's value as JSON holds it (tuples as lists)."""
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


def field_json(hw: HardwareSpec, name: str) -> Any:
    """Field ``name`` of ``hw`` as a results row records it: its :meth:`HardwareSpec.to_dict`
    form (a per-dtype map as a mapping, as the chip stored beside the results has it), so
    that a row's column and its chip compare equal."""
    return _jsonable(hw.to_dict()[name])
