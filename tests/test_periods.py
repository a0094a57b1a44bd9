"""The period detector (tvm_icca.elk.periods): exact against a brute-force scan of every block."""

from __future__ import annotations

import random

import pytest

from tvm_icca.elk.periods import Repeats, find_repeats


def brute_force(keys):
    """Every (start, period, count >= 2) block of identical periods; the most items covered,
    then the shortest period, then the earliest start."""
    n = len(keys)
    best, best_rank = None, None
    for start in range(n):
        for period in range(1, n - start + 1):
            count = 1
            while (start + (count + 1) * period <= n
                   and keys[start + count * period:start + (count + 1) * period]
                   == keys[start:start + period]):
                count += 1
            if count < 2:
                continue
            rank = (-count * period, period, start)
            if best_rank is None or rank < best_rank:
                best, best_rank = Repeats(start, period, count), rank
    return best


def _primitive(rng, alphabet, length):
    """A sequence over ``alphabet`` that is not itself a repetition of a shorter one."""
    while True:
        unit = [rng.choice(alphabet) for _ in range(length)]
        if find_repeats(unit + unit) == Repeats(0, length, 2):
            return unit


@pytest.mark.parametrize("seed", range(6))
def test_prefix_repeats_suffix_found_exactly(seed):
    """prefix + k repeats of a layer + suffix (prefix and suffix of distinct other items): the
    layer, where it starts, and how many, as the brute force finds them."""
    rng = random.Random(seed)
    for _ in range(40):
        unit = _primitive(rng, "abcd", rng.randint(1, 6))
        count = rng.randint(2, 6)
        prefix = rng.sample("pqrs", rng.randint(0, 4))     # items of their own, none repeated
        suffix = rng.sample("uvwx", rng.randint(0, 4))
        keys = prefix + unit * count + suffix
        found = find_repeats(keys)
        assert found == brute_force(keys)
        assert found.period == len(unit) and found.count * found.period == len(unit) * count
        # a layer may start inside the prefix only where the prefix ends as the layer does
        assert found.start == len(prefix)
        assert found.end == len(prefix) + len(unit) * count
        assert [found.layer_of(i) for i in (found.start, found.end - 1)] == [0, count - 1]
        assert found.layer_of(found.start - 1) is None and found.layer_of(found.end) is None


@pytest.mark.parametrize("seed", range(4))
def test_random_sequences_match_brute_force(seed):
    """Small alphabets, so that many blocks tie and overlap: the same block as the scan."""
    rng = random.Random(100 + seed)
    for _ in range(150):
        keys = [rng.choice("ab" if rng.random() < 0.5 else "abc") for _ in range(rng.randint(0, 24))]
        assert find_repeats(keys) == brute_force(keys), keys


def test_rotated_layer_starts_earliest():
    """When the prefix ends like a layer, the block starts there (the earliest start)."""
    keys = list("q" + "b" + "ab" * 3)     # "ab" x 3 from 2, or "ba" x 3 from 1
    assert find_repeats(keys) == brute_force(keys) == Repeats(1, 2, 3)


def test_nothing_repeats():
    assert find_repeats([]) is None
    assert find_repeats(["a"]) is None
    assert find_repeats(list("abcdef")) is None
    assert brute_force(list("abcdef")) is None


def test_any_hashable_keys():
    keys = [("embed", 1)] + [("q", 2), ("mlp", 3)] * 4 + [("head", 4)]
    assert find_repeats(keys) == Repeats(1, 2, 4)
