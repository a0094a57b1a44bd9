"""Tensor lifetimes and held SRAM (runtime_sim.contract.lifetimes), and the link closed forms (runtime_sim.machine.links)."""

import math

import numpy as np
import pytest

from runtime_sim.contract.lifetimes import (
    held_beside_later,
    held_between,
    held_bytes,
    last_reads,
    outlives,
    released,
    staying_outputs,
)
from runtime_sim.contract.presets import small_chip
from runtime_sim.machine.links import (
    chunk_latency_seconds,
    link_transfer_seconds,
    replica_reduction_busy_seconds,
    replica_reduction_schedule,
    replica_reduction_seconds,
)


def test_last_reads_and_release():
    ops = [("x", "w"), ("a",), ("a", "b")]
    last = last_reads(ops, ["b"])
    assert last == {"x": 0, "w": 0, "a": 2, "b": 3}
    assert released(last, ["x", "a", "b"], 0) == ["x"]
    assert released(last, ["a", "b"], 2) == ["a"]
    assert outlives(last, "b", 2) and not outlives(last, "a", 2) and not outlives(last, "never", 0)


def test_held_bytes_counts_earlier_outputs_still_read():
    # a = op0(x); b = op1(a); c = op2(a, b); region output: b
    ops, outs = [("x",), ("a",), ("a", "b")], ["a", "b", "c"]
    # while op2 runs, a (read last by op2) has moved into op2's partitions; b is a region output
    assert held_bytes(ops, outs, ["b"], [100, 10, 1]) == [0, 100, 10]
    # only the operators planned so far count
    assert held_bytes(ops, outs, ["b"], [100]) == [0, 100, 0]
    assert held_bytes(ops, outs, ["b", "a"], [100, 10]) == [0, 100, 110]
    assert held_bytes(ops, outs, [], []) == [0, 0, 0]


def _random_region(rng: np.random.Generator) -> tuple[list[tuple[str, ...]], list[str], list[str]]:
    """Operator inputs, operator outputs and region outputs of a random region."""
    n = int(rng.integers(1, 12))
    outs = [f"t{i}" for i in range(n)]
    ops = [tuple(outs[j] for j in range(i) if rng.random() < 0.4) for i in range(n)]
    return ops, outs, [o for o in outs if rng.random() < 0.2]


def test_held_bytes_is_the_definition_on_random_regions():
    rng = np.random.default_rng(3)
    for _ in range(50):
        ops, outs, region_out = _random_region(rng)
        n = len(ops)
        sizes = [int(b) for b in rng.integers(1, 100, int(rng.integers(0, n + 1)))]
        last = last_reads(ops, region_out)
        want = [sum(b for j, b in enumerate(sizes[:i]) if outlives(last, outs[j], i)) for i in range(n)]
        assert held_bytes(ops, outs, region_out, sizes) == want


def test_held_between_operators_keeps_what_the_next_one_reads_last():
    # a = op0(x); b = op1(a); c = op2(a, b); region output: b
    ops, outs = [("x",), ("a",), ("a", "b")], ["a", "b", "c"]
    # before op2 starts, a and b still wait where op0 and op1 left them (held_bytes counts
    # neither beside op2: a moves into its partitions, b is not yet produced while op1 runs)
    assert held_between(ops, outs, ["b"], [100, 10, 1]) == [0, 100, 110, 10]
    assert held_between(ops, outs, ["b"], [100]) == [0, 100, 100, 0]
    assert held_between(ops, outs, [], []) == [0, 0, 0, 0]


def test_held_between_is_the_definition_on_random_regions():
    # gap k (before operator k, k = n after the last) holds every earlier output that an
    # operator from k on reads or the region keeps: written from that sentence alone
    rng = np.random.default_rng(4)
    for _ in range(50):
        ops, outs, region_out = _random_region(rng)
        n = len(ops)
        sizes = [int(b) for b in rng.integers(1, 100, int(rng.integers(0, n + 1)))]
        want = [sum(b for j, b in enumerate(sizes[:k])
                    if outs[j] in region_out or any(outs[j] in ops[i] for i in range(k, n)))
                for k in range(n + 1)]
        assert held_between(ops, outs, region_out, sizes) == want
        # a gap holds what the operator before held while it ran, and that operator's output
        # if it is still to be read
        held = held_bytes(ops, outs, region_out, sizes)
        last = last_reads(ops, region_out)
        for k in range(1, min(len(sizes), n) + 1):
            kept = sizes[k - 1] if outlives(last, outs[k - 1], k - 1) else 0
            assert want[k] == held[k - 1] + kept


def test_held_beside_later_are_the_outputs_that_take_sram_from_other_operators():
    # the outputs held beside a later operator are those whose size changes some other
    # operator's held bytes: checked against held_bytes itself on random regions
    rng = np.random.default_rng(5)
    for _ in range(50):
        ops, outs, region_out = _random_region(rng)
        n = len(ops)
        base = held_bytes(ops, outs, region_out, [1] * n)
        moving = [j for j in range(n)
                  if held_bytes(ops, outs, region_out, [1] * j + [2] + [1] * (n - j - 1)) != base]
        assert held_beside_later(ops, outs, region_out) == moving


def test_link_transfer_closed_form():
    hw = small_chip(4, 64 * 1024, link_latency_s=1e-7)
    for n in (1, 100, hw.shift_buffer_bytes, hw.shift_buffer_bytes + 1, 10 ** 6):
        want = n / hw.link_bandwidth + math.ceil(n / hw.shift_buffer_bytes) * hw.link_latency_s
        assert link_transfer_seconds(n, hw) == want
        assert isinstance(link_transfer_seconds(n, hw), float)
    assert link_transfer_seconds(0, hw) == 0.0
    arr = link_transfer_seconds(np.array([[0, 1], [8192, 8193]]), hw)
    assert arr.shape == (2, 2) and arr[0, 0] == 0 and arr[1, 1] == link_transfer_seconds(8193, hw)
    hops = np.array([1, 3])
    assert list(chunk_latency_seconds(np.array([8192.0, 8193.0]), hw, hops)) == [
        1 * 1 * hw.link_latency_s, 2 * 3 * hw.link_latency_s]


@pytest.mark.parametrize("R,pbytes", [(1, 4096), (2, 100), (5, 4096), (16, 10 ** 6), (64, 64), (23, 20)])
def test_replica_reduction_is_the_fastest_schedule(R, pbytes):
    hw = small_chip(64, 256 * 1024, link_latency_s=1e-7)
    elems = pbytes / 4
    s = replica_reduction_schedule(R, pbytes, elems, hw)
    add = elems / hw.vector_flops_per_cycle / hw.clock_hz
    sync = hw.sync_cycles / hw.clock_hz
    one = link_transfer_seconds(pbytes, hw)
    chunks = max(1, math.ceil(pbytes / hw.shift_buffer_bytes))
    assert s.chunks == chunks
    assert s.chain_stages == chunks + R - 2

    def gather(radix):  # per round the root takes min(radix - 1, ceil(R / radix^j) - 1) partitions
        fans, span = [], 1
        while span < R:
            fans.append(min(radix - 1, math.ceil(R / span) - 1))
            span *= radix
        lat = one - pbytes / hw.link_bandwidth
        return len(fans), sum(fans) * (pbytes / hw.link_bandwidth + add) + len(fans) * (lat + sync)

    radices = [2 ** k for k in range(1, max(1, math.ceil(math.log2(max(R, 2)))) + 1)]
    tree = min(gather(r)[1] for r in radices)
    radix = min(radices, key=lambda r: (gather(r)[1], r))
    assert s.tree_radix == radix and s.tree_rounds == gather(radix)[0]
    if R > 1:  # radix 2 is the binomial tree
        assert gather(2)[0] == math.ceil(math.log2(R))
        assert gather(2)[1] == pytest.approx(math.ceil(math.log2(R)) * (one + add + sync), rel=1e-12)
    chain = one + (R - 2) * (pbytes / chunks / hw.link_bandwidth + hw.link_latency_s) \
        + (chunks + R - 2) * add / chunks + sync
    # reduce-scatter + gather: pieces of ceil(E / R) elements, R - 1 received and added by
    # every replica, then the other min(R, E) - 1 sums gathered by ring 0; two rounds
    piece_elems = math.ceil(elems / R)
    q = piece_elems * 4
    received = (R - 1) + (min(R, elems) - 1)
    scatter = (received * q / hw.link_bandwidth + 2 * math.ceil(q / hw.shift_buffer_bytes) * hw.link_latency_s
               + (R - 1) * piece_elems / hw.vector_flops_per_cycle / hw.clock_hz + 2 * sync)
    want = min(tree, chain, scatter) if R > 1 else 0.0
    assert replica_reduction_seconds(R, pbytes, elems, hw) == pytest.approx(want, rel=1e-12)
    # the bandwidth it holds: the fastest schedule's received bytes at its busiest core
    # (a tree's root takes its fan-in, a chain's ranks one partition each, a reduce-scatter's
    # ring 0 its pieces and the sums), no latency, adds or syncs; ties go to the tree, then
    # the chain
    if R <= 1:
        busy = 0.0
    elif scatter < min(tree, chain):
        busy = received * q / hw.link_bandwidth
    elif tree <= chain:
        rounds = gather(radix)[0]
        fan_sum = sum(min(radix - 1, math.ceil(R / radix ** j) - 1) for j in range(rounds))
        busy = fan_sum * pbytes / hw.link_bandwidth
    else:
        busy = pbytes / hw.link_bandwidth
    assert replica_reduction_busy_seconds(R, pbytes, elems, hw) == pytest.approx(busy, rel=1e-12)


def test_held_bytes_incremental_matches_the_whole_region_rule():
    """HeldBytes fed one operator at a time (as the planner learns output sizes) gives, for
    each operator, what held_bytes gives once every earlier size is known; brute force over
    (i, j) pairs is the reference."""
    import random

    from runtime_sim.contract.lifetimes import HeldBytes

    rng = random.Random(7)
    for _ in range(50):
        n = rng.randint(1, 12)
        outs = [f"t{i}" for i in range(n)]
        ops = [[f"t{j}" for j in range(i) if rng.random() < 0.3] for i in range(n)]
        region_out = [o for o in outs if rng.random() < 0.2]
        sizes = [rng.randint(1, 100) for _ in range(n)]
        last = last_reads(ops, region_out)
        brute = [sum(sizes[j] for j in range(i) if last.get(outs[j], -1) > i) for i in range(n)]
        tracker = HeldBytes(ops, outs, region_out)
        seen = []
        for i in range(n):
            seen.append(tracker.held(i))
            tracker.add(sizes[i])
        assert seen == brute == held_bytes(ops, outs, region_out, sizes)
    tracker = HeldBytes([[], ["t0"], ["t0"]], ["t0", "t1", "t2"], [])
    tracker.add(5)
    tracker.held(2)
    with pytest.raises(ValueError):
        tracker.held(0)


def test_host_outputs_leave_the_chip_as_they_are_produced():
    """A region output the host reads is not held to the region's end: only the others
    stay (a prefill's keys and values of every layer would otherwise pile up on chip)."""
    assert staying_outputs(["a", "b", "c"], ["b"]) == ("a", "c")
    assert staying_outputs(["a"], []) == ("a",)
    ops, outs = [[], [], ["b"]], ["a", "b", "c"]
    # no operator reads "a": held to the end as a staying output, gone once produced if it leaves
    assert held_bytes(ops, outs, staying_outputs(["a", "c"], []), [100, 10, 1]) == [0, 100, 100]
    assert held_bytes(ops, outs, staying_outputs(["a", "c"], ["a"]), [100, 10, 1]) == [0, 0, 0]
