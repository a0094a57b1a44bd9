"""The plan cache across chips and processes: keys on the fields a plan reads, the on-disk
layer (tvm_icca.model_pass.plan_store), its versions, concurrent writers and torn entries, and
compilations from a warm cache identical to cold ones."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest

import tvm_icca
from runtime_sim.contract.errors import PlanNotFoundError
from runtime_sim.contract.hardware import KIB
from runtime_sim.contract.presets import small_chip
from tvm_icca.drivers.device_programs import compile_programs
from tvm_icca.model_pass import plan_store
from tvm_icca.model_pass.plan_cache import PlanCache
from tvm_icca.model_pass.plan_store import PlanStore, default_plan_cache_dir
from tvm_icca.plan_search import search as search_module
from tvm_icca.plan_search.search_memo import SearchMemo
from tvm_icca.workloads import get_workload

#: Two chips with HBM, so that plans are placed on chips near their HBM inputs.
CHIP = small_chip(64, 64 * KIB, name="two-hbm", num_chips=2, hbm_bandwidth=1e12, hbm_controllers=4,
                  inter_chip_bandwidth=50e9)


class _Searches:
    """Counts the plan searches (not the answers from a memo or the disk)."""

    def __init__(self, monkeypatch):
        self.count = 0
        real = search_module._search  # pylint: disable=protected-access

        def counted(*args, **kwargs):
            self.count += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(search_module, "_search", counted)


def test_store_round_trip(tmp_path):
    store = PlanStore(tmp_path)
    key = ("search", '{"kind":"matmul"}', (("num_cores", 64), ("link_bandwidth", 5.5e9)), 4096)
    assert store.get(key) is None
    store.put(key, {"plan": [1, 2, 3]})
    assert PlanStore(tmp_path).get(key) == {"plan": [1, 2, 3]}
    assert PlanStore(tmp_path).get(key[:-1] + (4097,)) is None
    assert len(store) == 1 and store.writes == 1
    assert not [n for n in os.listdir(store.directory) if n.startswith(".tmp")]


def test_default_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("TVM_ICCA_PLAN_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_plan_cache_dir() == str(tmp_path / "tvm_icca" / "plans")
    monkeypatch.setenv("TVM_ICCA_PLAN_CACHE", str(tmp_path / "mine"))
    assert default_plan_cache_dir() == str(tmp_path / "mine")
    assert PlanCache.persistent().store.root == str(tmp_path / "mine")


def test_version_invalidates(tmp_path, monkeypatch):
    key = ("k", 1)
    PlanStore(tmp_path).put(key, "old plans")
    assert PlanStore(tmp_path).get(key) == "old plans"
    assert PlanStore(tmp_path, version="v999-0.0").get(key) is None
    # a code change that alters plans bumps the format: nothing written before is read
    before = plan_store.store_version()
    monkeypatch.setattr(plan_store, "PLAN_FORMAT", plan_store.PLAN_FORMAT + 1)
    assert plan_store.store_version() != before
    assert PlanStore(tmp_path).get(key) is None


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "other key"])
def test_corrupt_entry_is_a_miss_and_recomputed(tmp_path, damage, exprs, monkeypatch):
    expr = exprs.matmul(32, 256, 256, "float16")
    cold = PlanCache(jobs=1, path=tmp_path).plan(expr, CHIP, None, 32 * KIB, "mm", (1,))
    store = PlanStore(tmp_path)
    files = [os.path.join(store.directory, n) for n in os.listdir(store.directory)]
    assert files
    for path in files:
        data = open(path, "rb").read()
        if damage == "truncate":
            data = data[: len(data) // 2]
        elif damage == "garbage":
            data = b"not a plan" * 10
        elif damage == "empty":
            data = b""
        else:
            data = data.replace(b"mm", b"xx") if b"mm" in data else data[:40] + b"?" + data[41:]
        open(path, "wb").write(data)
    searches = _Searches(monkeypatch)
    warm = PlanCache(jobs=1, path=tmp_path)
    again = warm.plan(expr, CHIP, None, 32 * KIB, "mm", (1,))
    assert searches.count == 1  # searched again
    assert (again.plan, again.cost) == (cold.plan, cold.cost)
    # ... and written back whole
    searches.count = 0
    PlanCache(jobs=1, path=tmp_path).plan(expr, CHIP, None, 32 * KIB, "mm", (1,))
    assert searches.count == 0


def test_fresh_process_reads_the_disk(tmp_path, exprs, monkeypatch):
    expr = exprs.matmul(32, 256, 256, "float16")
    cold = PlanCache(jobs=1, path=tmp_path).plan(expr, CHIP, None, 32 * KIB, "mm", (1,))
    searches = _Searches(monkeypatch)
    warm = PlanCache(jobs=1, path=tmp_path)
    renamed = exprs.matmul(32, 256, 256, "float16")
    hit = warm.plan(renamed, CHIP, None, 32 * KIB, "other", (1,))
    assert searches.count == 0 and warm.store.reads > 0
    assert (hit.plan, hit.cost, hit.memory_bytes_per_core) == (cold.plan, cold.cost, cold.memory_bytes_per_core)


def test_keys_hold_only_the_fields_a_plan_reads(exprs, monkeypatch):
    """A chip differing in HBM bandwidth reuses the search (and, for an operator without HBM
    inputs, the placed plan); one differing in link bandwidth searches again."""
    expr = exprs.matmul(32, 256, 256, "float16")
    cache = PlanCache(jobs=1)
    searches = _Searches(monkeypatch)
    cache.plan(expr, CHIP, None, 32 * KIB, "mm", (1,))
    cache.plan(expr, CHIP, None, 32 * KIB, "mm", ())
    assert searches.count == 1
    faster_hbm = CHIP.with_overrides(hbm_bandwidth=8e12, name="faster hbm")
    hits = cache.hits
    cache.plan(expr, faster_hbm, None, 32 * KIB, "mm", ())
    assert cache.hits == hits + 1  # nothing of it reads the HBM
    placed = cache.plan(expr, faster_hbm, None, 32 * KIB, "mm", (1,))
    assert searches.count == 1  # placed again for these rates, not searched
    assert placed.plan == tvm_icca.plan_search.plan_operator(expr, faster_hbm, budget_bytes=32 * KIB,
                                                       hbm_inputs=(1,)).plan
    searches.count = 1  # (less the reference's search, without a cache)
    cache.plan(expr, CHIP.with_overrides(topology="mesh"), None, 32 * KIB, "mm", (1,))
    assert searches.count == 1
    cache.plan(expr, CHIP.with_overrides(link_bandwidth=2 * CHIP.link_bandwidth), None, 32 * KIB, "mm", (1,))
    assert searches.count == 2


def test_failure_is_kept_and_names_the_asking_chip(tmp_path, exprs, monkeypatch):
    expr = exprs.matmul(32, 512, 512, "float16")
    with pytest.raises(PlanNotFoundError, match="operator 'first'.*chip 'two-hbm'"):
        PlanCache(jobs=1, path=tmp_path).plan(expr, CHIP, None, 4 * KIB, "first")
    searches = _Searches(monkeypatch)
    other = CHIP.with_overrides(name="renamed", hbm_bandwidth=2e12)
    with pytest.raises(PlanNotFoundError, match="operator 'second'.*chip 'renamed'"):
        PlanCache(jobs=1, path=tmp_path).plan(expr, other, None, 4 * KIB, "second")
    assert searches.count == 0
    # reading an input from HBM, its placement depends on the HBM bandwidth; the search that
    # proves no plan fits does not: a sweep's next HBM bandwidth does not run it again
    small = exprs.matmul(32, 256, 256, "float16")  # fits the chip, no plan within 2 KiB
    cache = PlanCache(jobs=1, path=tmp_path)
    with pytest.raises(PlanNotFoundError, match="no execution plan"):
        cache.plan(small, CHIP, None, 2 * KIB, "first", (1,))
    assert searches.count == 1
    for chip in (other, CHIP.with_overrides(hbm_bandwidth=3e12)):
        with pytest.raises(PlanNotFoundError, match="operator 'third'.*no execution plan"):
            PlanCache(jobs=1, path=tmp_path).plan(small, chip, None, 2 * KIB, "third", (1,))
        with pytest.raises(PlanNotFoundError, match="operator 'third'.*no execution plan"):
            cache.plan(small, chip, None, 2 * KIB, "third", (1,))
    assert searches.count == 1


def _writer(path: str, worker: int, rounds: int) -> None:
    store = PlanStore(path)
    for r in range(rounds):
        store.put(("shared", r % 5), {"value": r % 5, "payload": list(range(2000))})
        store.put(("own", worker, r), worker * 1000 + r)
        got = store.get(("shared", (r + 2) % 5))
        assert got is None or got["value"] == (r + 2) % 5


def test_concurrent_writers(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, 60)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    store = PlanStore(tmp_path)
    for v in range(5):
        assert store.get(("shared", v)) == {"value": v, "payload": list(range(2000))}
    for w in range(2):
        assert [store.get(("own", w, r)) for r in range(60)] == [w * 1000 + r for r in range(60)]
    assert store.corrupt == 0
    assert not [n for n in os.listdir(store.directory) if n.startswith(".tmp")]
    assert len(store) == 5 + 2 * 60


def _holder(path, ready):
    """Holds a key's lock, says so, and writes the key's entry a second later."""
    store = PlanStore(path)
    with store.lock(("held",)):
        with open(ready, "w", encoding="utf-8"):
            pass
        time.sleep(1.0)
        store.put(("held",), "computed by the holder")


def test_a_key_is_computed_by_one_process_at_a_time(tmp_path):
    """A process computing a key holds its lock; another asking for the key meanwhile waits
    and reads the first one's entry instead of computing it (the sweep's workers share their
    searches this way); a key nobody holds is computed at once."""
    ready = tmp_path / "ready"
    holder = multiprocessing.get_context("spawn").Process(target=_holder,
                                                          args=(str(tmp_path), str(ready)))
    holder.start()
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ready.exists(), "the holder never took the lock"
        memo = SearchMemo(store=PlanStore(tmp_path))
        computed = []
        start = time.monotonic()
        value = memo.planned_once(("held",), lambda: computed.append(1) or "computed here")
        assert value == "computed by the holder" and not computed
        assert time.monotonic() - start > 0.3  # it waited for the holder
        assert memo.planned_once(("free",), lambda: computed.append(1) or 7) == 7 and computed
        assert PlanStore(tmp_path).get(("free",)) == 7
    finally:
        holder.join(120)
    assert holder.exitcode == 0


def test_warm_compile_gives_identical_programs(tmp_path, monkeypatch):
    """A compilation answered from a warm persistent cache (another process's, here a new
    cache on the same directory) and one on a chip differing in HBM bandwidth, after the
    first, are byte for byte the compilations from nothing."""
    workload = get_workload("llama2-13b", tiny=True, batch=2, context=8, num_layers=2)
    faster = CHIP.with_overrides(hbm_bandwidth=4e12)

    def texts(model):
        return [p.to_json() for p in model.programs]

    cold = texts(compile_programs(workload, CHIP, plan_cache=PlanCache(jobs=1), preload="elk-full"))
    cold_faster = texts(compile_programs(workload, faster, plan_cache=PlanCache(jobs=1),
                                         preload="elk-full"))
    assert cold != cold_faster  # the schedule sees the bandwidth
    first = PlanCache(jobs=1, path=tmp_path)
    assert texts(compile_programs(workload, CHIP, plan_cache=first, preload="elk-full")) == cold
    partitions = []
    real = compile_programs.__globals__["partition_module"]
    monkeypatch.setitem(compile_programs.__globals__, "partition_module",
                        lambda *a, **k: partitions.append(1) or real(*a, **k))
    searches = _Searches(monkeypatch)
    assert texts(compile_programs(workload, faster, plan_cache=first, preload="elk-full")) == cold_faster
    assert searches.count == 0 and not partitions  # same searches, same partitioned module
    warm = PlanCache(jobs=1, path=tmp_path)
    assert texts(compile_programs(workload, faster, plan_cache=warm, preload="elk-full")) == cold_faster
    assert searches.count == 0 and warm.store.reads > 0
