"""Tensor expressions of the device contract (runtime_sim.contract.expr): the structure key."""

from __future__ import annotations

import dataclasses
import json
import pickle

from tvm_icca.testing.exprs import matmul


def _key_afresh(expr, views: bool) -> str:
    """The key as its definition reads: canonical JSON of to_dict, tensor names blanked."""
    data = expr.to_dict()
    for access in (*data["inputs"], data["output"]):
        access["name"] = ""
        if not views:
            access.pop("view", None)
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def test_structure_key_is_kept_and_stays_the_definition() -> None:
    """Asked again, the key is the one computed (kept on the frozen expression), equal to
    its definition for both ``views``; a renamed copy shares it, another shape does not, and
    the kept key changes neither equality nor a pickled round trip."""
    expr = matmul(8, 16, 4)
    for views in (True, False):
        first = expr.structure_key(views=views)
        assert expr.structure_key(views=views) is first
        assert first == _key_afresh(expr, views)
    renamed = dataclasses.replace(expr, output=dataclasses.replace(expr.output, name="other"))
    assert renamed.structure_key() == expr.structure_key() and renamed != expr
    assert matmul(8, 16, 8).structure_key() != expr.structure_key()
    fresh = matmul(8, 16, 4)
    assert fresh == expr and "_structure_keys" not in fresh.__dict__
    again = pickle.loads(pickle.dumps(expr))
    assert again == expr and again.structure_key(False) == _key_afresh(expr, False)


def test_renamed_output_shares_the_key_memo() -> None:
    """Renamed per operator call (the identical layers), an expression keeps one memo: a key
    computed on any copy is every copy's, and is its definition; a copy changed otherwise
    (dataclasses.replace) starts its own."""
    expr = matmul(8, 16, 4)
    copies = [expr.with_output_name(f"layer{k}.out") for k in range(3)]
    assert [c.output.name for c in copies] == ["layer0.out", "layer1.out", "layer2.out"]
    assert all(c != expr and c.inputs == expr.inputs for c in copies)
    key = copies[1].structure_key()
    assert key == _key_afresh(copies[1], True) == _key_afresh(expr, True)
    assert all(c.structure_key() is key for c in copies) and expr.structure_key() is key
    wider = dataclasses.replace(copies[0], axes=matmul(8, 16, 8).axes)
    assert "_structure_keys" not in wider.__dict__
