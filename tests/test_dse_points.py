"""tvm_icca.dse.points: a study's points, their stable keys and their cache-friendly order."""

from __future__ import annotations

from tvm_icca.dse import DseSpec, expand
from tvm_icca.dse.points import point_key

STUDY = {
    "hardware": {"base": "ipu-mk2", "num_cores": 16, "sram_bytes_per_core": 65536,
                 "hbm_controllers": 2, "hbm_bandwidth": 1e11},
    # num_cores changes the chip's shape, hbm_bandwidth only a rate
    "grid": {"hbm_bandwidth": [1e10, 1e11], "num_cores": [16, 32]},
    "points": [{"num_cores": 16, "hbm_bandwidth": 4e11}],
    "workloads": [{"name": "llama2-7b", "tiny": True, "context": 64}, "nerf"],
    "designs": ["static", "elk-full"],
}


def test_expansion_and_order():
    spec = DseSpec.from_dict(STUDY)
    points = expand(spec)
    assert len(points) == 2 * (4 + 1) * 2  # workloads x chips x designs
    assert [p.index for p in points] == list(range(len(points)))
    assert len({p.key for p in points}) == len(points)
    first = points[:10]  # the first workload's, grouped by chip shape, designs innermost
    assert all(p.workload["workload"] == "llama2-7b" for p in first)
    assert [p.hw.num_cores for p in first] == [16] * 6 + [32] * 4
    assert [p.hw.hbm_bandwidth for p in first[:6:2]] == [1e10, 1e11, 4e11]
    assert [p.design for p in first[:2]] == ["static", "elk-full"]
    groups = [p.group for p in first]
    assert len(set(groups[:6])) == 1 and len(set(groups[6:])) == 1 and groups[0] != groups[6]
    assert points[10].group not in groups  # another workload, another group
    # the row's flat inputs: the base chip, fixed and swept fields, workload args, design
    inputs = first[0].inputs(spec)
    assert inputs["hbm_bandwidth"] == 1e10 and inputs["num_cores"] == 16
    assert inputs["sram_bytes_per_core"] == 65536 and inputs["context"] == 64
    assert inputs["design"] == "static" and inputs["state"] == "auto"


def test_keys_are_stable():
    a = expand(DseSpec.from_dict(STUDY))
    b = expand(DseSpec.from_dict(dict(STUDY, name="renamed", results="elsewhere.jsonl")))
    assert [p.key for p in a] == [p.key for p in b]  # the study's name is not an input
    # the same chip reached another way (a fixed field instead of a grid value) is the same key
    other = expand(DseSpec.from_dict(dict(STUDY, grid={"num_cores": [16]}, points=[],
                                          workloads=["nerf"], designs=["static"])))
    same = [p for p in a if p.workload == {"workload": "nerf"} and p.hw.num_cores == 16
            and p.hw.hbm_bandwidth == 1e11 and p.design == "static"]
    assert [p.key for p in other] == [same[0].key]
    # a key depends on every input
    p = a[0]
    base = point_key(p.hw, p.workload, p.design, p.state, p.execution)
    assert base == p.key
    assert point_key(p.hw.with_overrides(sync_cycles=1), p.workload, p.design, None, "t10") != base
    assert point_key(p.hw, {**p.workload, "batch": 2}, p.design, None, "t10") != base
    assert point_key(p.hw, p.workload, "basic", None, "t10") != base
    assert point_key(p.hw, p.workload, p.design, "hbm", "t10") != base
    assert point_key(p.hw, p.workload, p.design, None, "vgm") != base
    # notes are free text, not an input
    assert point_key(p.hw.with_overrides(notes="x"), p.workload, p.design, None, "t10") == base
    # pinned: a key never changes silently (a change must bump points.KEY_FORMAT)
    assert len(base) == 64 and int(base, 16) >= 0


def test_duplicate_chips_are_one_point():
    spec = DseSpec.from_dict(dict(STUDY, points=[{"num_cores": 16, "hbm_bandwidth": 1e10}]))
    assert len(expand(spec)) == 2 * 4 * 2


def test_explicit_point_has_every_swept_column():
    """A point that sets one field still has a value for every field the grid or another
    point sets (its chip's), so a report places it on every axis instead of at 'None'."""
    spec = DseSpec.from_dict(dict(STUDY, points=[{"sram_bytes_per_core": 16384}]))
    points = expand(spec)
    rows = [p.inputs(spec) for p in points]
    swept = ("hbm_bandwidth", "num_cores", "sram_bytes_per_core")
    assert all(all(name in row for name in swept) for row in rows)
    explicit = [r for r in rows if r["sram_bytes_per_core"] == 16384]
    assert len(explicit) == 2 * 2  # two workloads, two designs
    assert all(r["hbm_bandwidth"] == 1e11 and r["num_cores"] == 16 for r in explicit)  # the base's
    grid = [r for r in rows if r["sram_bytes_per_core"] != 16384]
    assert {r["sram_bytes_per_core"] for r in grid} == {65536}


def test_point_id_survives_a_chip_change_and_chip_changes_names_fields():
    """A preset or fixed-field change changes every key but no point_id; chip_changes says how."""
    import json

    from tvm_icca.dse.points import chip_changes, chip_digest

    before = expand(DseSpec.from_dict(STUDY))
    edited = dict(STUDY, hardware={**STUDY["hardware"], "sync_cycles": 777})
    after = expand(DseSpec.from_dict(edited))
    assert [p.point_id for p in before] == [p.point_id for p in after]
    assert len({p.point_id for p in before}) == len(before)
    assert not {p.key for p in before} & {p.key for p in after}
    old = json.loads(json.dumps(before[0].hw.to_dict()))  # as the provenance file holds it
    assert chip_digest(old) == chip_digest(before[0].hw) != chip_digest(after[0].hw)
    assert chip_changes(old, after[0].hw.to_dict()) == [
        f"sync_cycles {before[0].hw.sync_cycles} -> 777"]
    assert chip_changes(old, before[0].hw.to_dict()) == []
    # a field added by a later version, and one it dropped
    grown = dict(after[0].hw.to_dict(), new_field=3)
    del grown["num_cores"]
    changes = chip_changes(old, grown)
    assert "num_cores 16 -> (absent)" in changes and "new_field (absent) -> 3" in changes
    assert chip_changes(None, grown)[0].startswith("the earlier chip was not recorded")
    # the notes describe the chip: neither its digest nor a change
    noted = dict(old, notes="a different description")
    assert chip_digest(noted) == chip_digest(old) and chip_changes(old, noted) == []
