"""Inter-core networks (runtime_sim.machine.topology) against closed forms and brute-force routing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime_sim.contract.mesh_grid import mesh_shape
from runtime_sim.contract.presets import preset, small_chip
from runtime_sim.machine.all_to_all import AllToAllTopology
from runtime_sim.machine.mesh_io import perimeter
from runtime_sim.machine.mesh_topology import MeshTopology, link_loads
from runtime_sim.machine.phase_cost import MulticastPattern
from runtime_sim.machine.topology import make_topology

LAT = 1e-7  # 100 ns per hop and chunk: large enough to show in every closed form below
KIB = 1024


def a2a(cores: int = 16, **kw) -> AllToAllTopology:
    return make_topology(small_chip(cores, link_latency_s=LAT, **kw))


def mesh(cores: int = 16, **kw) -> MeshTopology:
    return make_topology(small_chip(cores, link_latency_s=LAT, topology="mesh", **kw))


def test_mesh_shape_is_exact_and_near_square() -> None:
    assert mesh_shape(1472) == (32, 46)  # IPU Mk2: every row full
    assert mesh_shape(16) == (4, 4)
    assert mesh_shape(12) == (3, 4)
    assert mesh_shape(13) == (1, 13)  # a prime: a line
    assert sorted(perimeter(3, 4).tolist()) == [0, 1, 2, 3, 4, 7, 8, 9, 10, 11]
    assert perimeter(1, 5).tolist() == [0, 1, 2, 3, 4]


def test_all_to_all_one_shift_is_bandwidth_plus_latency_per_chunk() -> None:
    topo = a2a()
    hw = topo.hw
    B = 20_000  # 3 chunks of the 8 KiB shift buffer (T10 §5)
    cost = topo.phase([3], [7], [B])
    expected = B / hw.link_bandwidth + 3 * LAT
    assert cost.time_s == pytest.approx(expected, rel=1e-9)
    assert cost.uncontended_s == pytest.approx(expected) and cost.stall_s == pytest.approx(0)
    # the bandwidth it holds: the bytes alone (a chunk in flight leaves the link to others)
    assert cost.busy_s == pytest.approx(B / hw.link_bandwidth, rel=1e-12)
    # a whole ring shifting at once: every port carries one partition, no contention
    n = hw.num_cores
    ring = topo.phase(np.roll(np.arange(n), 1), np.arange(n), np.full(n, B))
    assert ring.time_s == pytest.approx(expected, rel=1e-9)
    assert ring.intra_bytes == pytest.approx(n * B)


def test_all_to_all_serializes_many_to_one_and_one_to_many() -> None:
    topo = a2a()
    bw = topo.hw.link_bandwidth
    N, B = 15, 4096  # one chunk each
    gather = topo.phase(np.arange(1, N + 1), np.zeros(N, int), np.full(N, B))
    assert gather.time_s == pytest.approx(N * B / bw + LAT, rel=1e-9)  # Elk §2.1
    assert gather.stall_s == pytest.approx((N - 1) * B / bw, rel=1e-9)
    scatter = topo.phase(np.zeros(N, int), np.arange(1, N + 1), np.full(N, B))
    assert scatter.time_s == pytest.approx(N * B / bw + LAT, rel=1e-9)


def test_all_to_all_multicast_sends_once() -> None:
    topo = a2a()
    bw = topo.hw.link_bandwidth
    N, B = 15, 4096
    src, dst = np.zeros(N, int), np.arange(1, N + 1)
    unicast = topo.phase(src, dst, np.full(N, B))
    broadcast = topo.phase(src, dst, np.full(N, B), multicast=np.zeros(N, int))
    assert unicast.time_s == pytest.approx(N * B / bw + LAT)
    assert broadcast.time_s == pytest.approx(B / bw + LAT)
    # the aggregated pattern form agrees with the explicit multicast flows
    pattern = MulticastPattern(
        piece_src=np.array([0]), piece_bytes=np.array([float(B)]),
        piece_receivers=np.array([[float(N)]]),
        recv_bytes=np.r_[0.0, np.full(N, float(B))],
        flows=lambda: (src, dst, np.full(N, float(B)), 1.0))
    assert topo.multicast_phase(pattern).time_s == pytest.approx(broadcast.time_s)
    # flows without piece ids: the mesh routes them as unicasts
    m = mesh()
    assert m.multicast_phase(pattern).time_s == pytest.approx(m.phase(src, dst, np.full(N, B)).time_s)


def test_mesh_k_hop_transfer() -> None:
    topo = mesh(64)  # 8 x 8
    assert (topo.rows, topo.cols) == (8, 8)
    bw = topo.hw.link_bandwidth
    B = 3 * 8 * KIB  # 3 chunks
    for k in (1, 3, 7):
        cost = topo.phase([topo.core_at(0, 2, 0)], [topo.core_at(0, 2, k)], [B])
        assert cost.max_hops == k
        assert cost.time_s == pytest.approx(B / bw + 3 * k * LAT, rel=1e-9)
    # XY: 3 hops east then 4 south
    cost = topo.phase([topo.core_at(0, 1, 1)], [topo.core_at(0, 5, 4)], [B])
    assert cost.max_hops == 7 and cost.time_s == pytest.approx(B / bw + 3 * 7 * LAT)


def test_mesh_link_contention_and_concurrent_neighbour_links() -> None:
    topo = mesh(16)
    bw = topo.hw.link_bandwidth
    B = 4096
    c = topo.core_at
    # a core drives its 4 neighbour links at once (Elk §6.1): no contention
    out4 = topo.phase([c(0, 1, 1)] * 4, [c(0, 0, 1), c(0, 2, 1), c(0, 1, 0), c(0, 1, 2)], [B] * 4)
    assert out4.time_s == pytest.approx(B / bw + LAT)
    # two flows over the same directed link (1,0)->(1,1) share it
    two = topo.phase([c(0, 1, 0), c(0, 1, 0)], [c(0, 1, 1), c(0, 1, 3)], [B, B])
    assert two.time_s == pytest.approx(2 * B / bw + 3 * LAT)  # the longer route: 3 hops
    assert two.stall_s == pytest.approx(B / bw)
    # opposite directions use different directed links
    swap = topo.phase([c(0, 1, 0), c(0, 1, 1)], [c(0, 1, 1), c(0, 1, 0)], [B, B])
    assert swap.time_s == pytest.approx(B / bw + LAT)


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_mesh_link_loads_match_hop_by_hop_routing(data) -> None:
    cores = data.draw(st.sampled_from([12, 16, 30]))
    topo = mesh(cores)
    n = data.draw(st.integers(1, 40))
    src = np.array(data.draw(st.lists(st.integers(0, cores - 1), min_size=n, max_size=n)))
    dst = np.array(data.draw(st.lists(st.integers(0, cores - 1), min_size=n, max_size=n)))
    b = np.array(data.draw(st.lists(st.integers(1, 10_000), min_size=n, max_size=n)), float)
    # brute force: walk every route hop by hop, X first then Y
    brute: dict[tuple, float] = {}
    for s, d, w in zip(src, dst, b):
        _, y, x = topo.position(s)
        _, yd, xd = topo.position(d)
        while x != xd:
            nx = x + (1 if xd > x else -1)
            brute[(y, x, y, nx)] = brute.get((y, x, y, nx), 0) + w
            x = nx
        while y != yd:
            ny = y + (1 if yd > y else -1)
            brute[(y, x, ny, x)] = brute.get((y, x, ny, x), 0) + w
            y = ny
    loads = link_loads(topo, src, dst, b)
    assert sum(v.sum() for v in loads.values()) == pytest.approx(sum(brute.values()))
    expected_max = max(brute.values(), default=0.0)
    assert max(v.max(initial=0) for v in loads.values()) == pytest.approx(expected_max)
    cost = topo.phase(src, dst, b)
    if expected_max:
        assert cost.intra_busy_s == pytest.approx(expected_max / topo.hw.link_bandwidth)


def test_multi_chip_transfer_is_capped_by_inter_chip_bandwidth() -> None:
    hw = preset("ipu-pod4")  # 4 x 1472 cores, 640 GB/s between chips (Elk §5)
    topo = make_topology(hw)
    n = hw.cores_per_chip
    B = 8 * KIB  # one shift-buffer chunk
    # every core of chip 0 sends one buffer to its twin on chip 1: one hop that crosses
    # chips, paying the hop's latency and the IPU-Link latency on top of the capped bytes
    cross_lat = hw.link_latency_s + hw.inter_chip_latency_s
    assert hw.inter_chip_latency_s > 0
    cost = topo.phase(np.arange(n), np.arange(n) + n, np.full(n, B))
    assert cost.inter_bytes == pytest.approx(n * B)
    assert cost.time_s == pytest.approx(n * B / hw.inter_chip_bandwidth + cross_lat, rel=1e-9)
    assert cost.time_s > B / hw.link_bandwidth  # the cap, not the core links, binds
    # the same pattern inside chip 0 is bound by the core links only, and pays one hop
    inside = topo.phase(np.arange(n), np.roll(np.arange(n), 1), np.full(n, B))
    assert inside.time_s == pytest.approx(B / hw.link_bandwidth + hw.link_latency_s)
    assert inside.inter_bytes == 0
    # on the mesh variant the cap applies the same way (the twin is one chip hop away)
    mhw = preset("ipu-pod4-hbm-mesh")
    mtopo = make_topology(mhw)
    mcost = mtopo.phase(np.arange(n), np.arange(n) + n, np.full(n, B))
    assert mcost.time_s == pytest.approx(
        n * B / mhw.inter_chip_bandwidth + mhw.link_latency_s + mhw.inter_chip_latency_s, rel=1e-6)


def test_hbm_controllers_sit_on_their_chip_edges() -> None:
    hw = preset("ipu-pod4-hbm-mesh")
    topo = make_topology(hw)
    edge = set(perimeter(topo.rows, topo.cols).tolist())
    assert set(np.unique(topo.entry).tolist()) <= edge
    for k in range(hw.num_chips):
        ctrls = topo.controllers_of_chip(k)
        assert ctrls.size == hw.hbm_controllers // hw.num_chips
        assert (topo.node_chip[topo.num_cores + ctrls] == k).all()
        assert (topo.home_controllers(k) == ctrls).all()
    # 4 controllers per chip: one side of the mesh each, together every edge port once
    ports = topo.io_ports()
    for k in range(hw.num_chips):
        spans = [ports[h] for h in topo.controllers_of_chip(k)]
        assert sorted(s.size for s in spans) == sorted([topo.cols, topo.cols, topo.rows, topo.rows])
        assert sorted(np.concatenate(spans).tolist()) == list(range(2 * (topo.rows + topo.cols)))
        assert all(np.unique(topo.port_side[s]).size == 1 for s in spans)
    # HBM data for a core is striped over the controllers of its chip
    src, dst, nbytes = topo.io_flows("hbm", np.array([0, hw.cores_per_chip]), np.array([400.0, 800.0]))
    assert set(topo.node_chip[src[dst == 0]].tolist()) == {0}
    assert set(topo.node_chip[src[dst == hw.cores_per_chip]].tolist()) == {1}
    assert nbytes[dst == 0].sum() == pytest.approx(400.0)


def test_hbm_delivery_on_all_to_all_is_bound_by_core_ports() -> None:
    topo = a2a(16, hbm_bandwidth=1e12, hbm_controllers=4)
    bw = topo.hw.link_bandwidth
    src, dst, nbytes = topo.io_flows("hbm", np.arange(16), np.full(16, 4096.0))
    cost = topo.phase(src, dst, nbytes)
    # each core's port takes its 4 KiB, striped over 4 controllers (1 KiB chunks)
    assert cost.time_s == pytest.approx(4096 / bw + LAT)


# -- mesh multicast (XY trees) and HBM edge injection -------------------------------------------


def test_mesh_one_to_many_multicast_carries_each_link_once() -> None:
    k = 8
    topo = mesh(k * k)
    bw = topo.hw.link_bandwidth
    B = 3 * 8 * KIB  # 3 chunks
    dst = np.arange(1, k * k)
    src = np.zeros(dst.size, int)  # corner (0, 0) to every other core
    b = np.full(dst.size, float(B))
    tree = topo.phase(src, dst, b, multicast=np.zeros(dst.size, int))
    # every link of the XY tree carries the packet once; the farthest core is 2(k-1) hops away
    assert tree.intra_busy_s == pytest.approx(B / bw)
    assert tree.max_hops == 2 * (k - 1)
    assert tree.time_s == pytest.approx(B / bw + 3 * 2 * (k - 1) * LAT, rel=1e-9)
    # unicast: the first east link carries one copy per core east of column 0, k (k - 1)
    uni = topo.phase(src, dst, b)
    assert uni.intra_busy_s == pytest.approx(k * (k - 1) * B / bw)
    assert uni.time_s == pytest.approx(k * (k - 1) * B / bw + 3 * 2 * (k - 1) * LAT, rel=1e-9)
    # the pattern form (a re-layout's pieces) multicasts when its flows carry piece ids
    pattern = MulticastPattern(
        piece_src=np.array([0]), piece_bytes=np.array([float(B)]),
        piece_receivers=np.array([[float(dst.size)]]), recv_bytes=np.r_[0.0, b],
        flows=lambda: (src, dst, b, 1.0, np.zeros(dst.size, int)))
    assert topo.multicast_phase(pattern).time_s == pytest.approx(tree.time_s)


def test_mesh_row_broadcast_vs_unicast() -> None:
    k = 8
    topo = mesh(k * k)
    bw = topo.hw.link_bandwidth
    B = 4096  # one chunk
    c = topo.core_at
    row = np.array([c(0, 3, x) for x in range(k)])
    # from the west end: k - 1 hops east, each link once
    dst = row[1:]
    one = np.zeros(dst.size, int)
    cast = topo.phase(np.full(dst.size, row[0]), dst, np.full(dst.size, B), multicast=one)
    assert cast.time_s == pytest.approx(B / bw + (k - 1) * LAT)
    uni = topo.phase(np.full(dst.size, row[0]), dst, np.full(dst.size, B))
    assert uni.time_s == pytest.approx((k - 1) * B / bw + (k - 1) * LAT)
    # from the middle: the tree branches east and west, still each link once
    mid = row[3]
    dst = np.delete(row, 3)
    cast = topo.phase(np.full(dst.size, mid), dst, np.full(dst.size, B), multicast=np.zeros(dst.size, int))
    assert cast.time_s == pytest.approx(B / bw + 4 * LAT)
    # two different pieces from the same source share the links: each is carried once
    two = topo.phase(np.full(2 * dst.size, mid), np.r_[dst, dst], np.full(2 * dst.size, B),
                     multicast=np.repeat([0, 1], dst.size))
    assert two.time_s == pytest.approx(2 * B / bw + 4 * LAT)


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_mesh_multicast_loads_match_the_union_of_routes(data) -> None:
    cores = data.draw(st.sampled_from([12, 16, 30]))
    topo = mesh(cores)
    pieces = data.draw(st.integers(1, 4))
    src, dst, b, grp = [], [], [], []
    for p in range(pieces):
        s = data.draw(st.integers(0, cores - 1))
        ds = data.draw(st.lists(st.integers(0, cores - 1), min_size=1, max_size=12, unique=True))
        w = data.draw(st.integers(1, 10_000))
        src += [s] * len(ds)
        dst += ds
        b += [w] * len(ds)
        grp += [p] * len(ds)
    src, dst, b, grp = map(np.array, (src, dst, b, grp))
    # brute force: per piece, the set of links of all its XY routes, each charged once
    brute: dict[tuple, float] = {}
    for p in range(pieces):
        links = set()
        for s, d in zip(src[grp == p], dst[grp == p]):
            _, y, x = topo.position(s)
            _, yd, xd = topo.position(d)
            while x != xd:
                nx = x + (1 if xd > x else -1)
                links.add((y, x, y, nx))
                x = nx
            while y != yd:
                ny = y + (1 if yd > y else -1)
                links.add((y, x, ny, x))
                y = ny
        w = float(b[grp == p][0])
        for link in links:
            brute[link] = brute.get(link, 0.0) + w
    cost = topo.phase(src, dst, b.astype(float), multicast=grp)
    expected = max(brute.values(), default=0.0)
    assert cost.intra_busy_s == pytest.approx(expected / topo.hw.link_bandwidth)


def hbm_mesh(k: int = 8, hbm_bandwidth: float = 1e12, controllers: int = 4) -> MeshTopology:
    return mesh(k * k, hbm_bandwidth=hbm_bandwidth, hbm_controllers=controllers)


def hbm_load_seconds(topo: MeshTopology, dst, nbytes, group=None) -> tuple[float, float]:
    """(load duration, network time) of an HBM load as the timing simulator takes it: the
    controllers read the unique bytes at hbm_bandwidth / controllers each, the network delivers."""
    hw = topo.hw
    flows = topo.io_flows("hbm", dst, nbytes, group)
    net = topo.phase(*flows[:3], multicast=flows[3] if group is not None else None)
    ctrl = flows[0] - topo.num_cores
    ids = flows[3] if group is not None else np.arange(ctrl.size)
    _, first = np.unique(ids, return_index=True)
    per_ctrl = np.bincount(ctrl[first], weights=flows[2][first], minlength=hw.hbm_controllers)
    source = float(per_ctrl.max()) / (hw.hbm_bandwidth / hw.hbm_controllers)
    return max(source, net.time_s), net.time_s


def test_mesh_edge_injection_of_one_controller() -> None:
    k = 8
    B = 64 * 8 * KIB
    for ctrl_bw in (4e9, 1e12):  # below and above its E = k edge links
        topo = hbm_mesh(k, hbm_bandwidth=4 * ctrl_bw)
        bw = topo.hw.link_bandwidth
        top = topo.io_ports()[0]
        assert (topo.port_side[top] == 0).all() and top.size == k  # controller 0: the top side
        # B distinct bytes from controller 0, spread evenly over the k x k cores
        dst = np.arange(k * k)
        per = np.full(dst.size, B / dst.size)
        net = topo.phase(np.full(dst.size, topo.controller_node(0)), dst, per)
        # each top port carries its column, straight down: B / E per edge link
        assert net.intra_busy_s == pytest.approx(B / k / bw)
        lat = 1 * k * LAT  # one chunk per core, up to k hops (port + k - 1 links)
        assert net.time_s == pytest.approx(B / k / bw + lat)
        duration = max(B / ctrl_bw, net.time_s)
        assert duration == pytest.approx(B / min(ctrl_bw, k * bw) + (lat if ctrl_bw > k * bw else 0))


def test_mesh_whole_chip_hbm_load_is_bounded_by_hbm_bandwidth() -> None:
    k = 8
    ports = 2 * (k + k)  # every edge port of the chip, 4 controllers, one side each
    b = 4 * 8 * KIB  # per core, distinct data; one chunk per controller stripe
    dst = np.arange(k * k)
    total = b * dst.size
    for hbm in (4e9, 1e12):
        topo = hbm_mesh(k, hbm_bandwidth=hbm)
        bw = topo.hw.link_bandwidth
        duration, net = hbm_load_seconds(topo, dst, np.full(dst.size, float(b)))
        # every controller injects through its k edge ports in parallel: the chip's edge
        # takes total / (ports * bw); the controllers read total / hbm
        assert net == pytest.approx(total / (ports * bw) + k * LAT)
        assert duration == pytest.approx(max(total / hbm, net))
        assert net < total / (k * bw)  # not one link per controller
    # replicas: every core needs the same b bytes -> each controller multicasts its quarter
    topo = hbm_mesh(k, hbm_bandwidth=1e12)
    bw = topo.hw.link_bandwidth
    _, cast = hbm_load_seconds(topo, dst, np.full(dst.size, float(b)), group=np.zeros(dst.size, int))
    assert cast == pytest.approx(b / 4 / bw + k * LAT)  # each edge port and tree link once


def test_mesh_hbm_load_slices_tensors_in_proportion_to_edge_ports() -> None:
    # a 4 x 8 mesh (32 cores): the 4 controllers sit on sides of 8, 4, 8 and 4 ports
    topo = mesh(32, hbm_bandwidth=1e12, hbm_controllers=4)
    rows, cols = topo.rows, topo.cols
    assert (rows, cols) == (4, 8)
    bw = topo.hw.link_bandwidth
    b = 64 * KIB  # distinct bytes per core
    dst = np.arange(32)
    total = b * dst.size
    src, d, nb = topo.io_flows("hbm", dst, np.full(dst.size, float(b)))
    unique = np.array([float(total)])
    # sliced evenly (Elk §5): each controller's quarter through its side; the short sides
    # (rows = 4 ports) carry total / 4 / rows per port, straight across
    even = topo.phase(src, d, nb)
    assert even.intra_busy_s == pytest.approx(total / 4 / rows / bw)
    # the load slices by ports instead: every one of the 2 (rows + cols) ports carries
    # total / 24, the controllers read unequal shares, far below their 0.25 TB/s
    net, source = topo.hbm_load(src, d, nb, None, unique)
    ports = 2 * (rows + cols)
    assert net.intra_busy_s == pytest.approx(total / ports / bw)
    assert source == pytest.approx(total * (cols / ports) / (1e12 / 4))
    assert net.time_s < even.time_s
    # the all-to-all network keeps the even slicing
    a = a2a(32, hbm_bandwidth=1e12, hbm_controllers=4)
    s2, d2, n2 = a.io_flows("hbm", dst, np.full(dst.size, float(b)))
    net2, source2 = a.hbm_load(s2, d2, n2, None, unique)
    assert source2 == pytest.approx(total / 4 / (1e12 / 4))
    assert net2.time_s == pytest.approx(a.phase(s2, d2, n2).time_s)


# -- mesh hardware as built (issue 27): controllers inside the grid, torus, injection cap -------
def grid_mesh(cores: int, rows: int, cols: int, **kw) -> MeshTopology:
    """A mesh with an explicit ``rows x cols`` NoC grid (cores fill the free nodes row-major)."""
    return mesh(cores, mesh_rows=rows, mesh_cols=cols, **kw)


def brute_force_loads(topo: MeshTopology, src, dst, nbytes) -> dict[str, np.ndarray]:
    """Link loads by walking every route hop by hop: X then Y, on a torus the shorter way
    round each ring (ties forward), link ids as MeshTopology.routes numbers them."""
    out = {"east": np.zeros(topo.num_chips * topo.n_h), "west": np.zeros(topo.num_chips * topo.n_h),
           "south": np.zeros(topo.num_chips * topo.n_v), "north": np.zeros(topo.num_chips * topo.n_v)}
    for s, d, b in zip(src, dst, nbytes):
        k, y, x = topo.position(s)
        _, yd, xd = topo.position(d)
        for axis, n, wrap in (("x", topo.cols, topo.wrap_x), ("y", topo.rows, topo.wrap_y)):
            here, there = (x, xd) if axis == "x" else (y, yd)
            step = 1 if there > here else -1
            if wrap:
                ahead = (there - here) % n
                step = 1 if ahead <= n - ahead else -1
            while here != there:
                nxt = (here + step) % n
                if axis == "x":
                    name, link = ("east", here) if step == 1 else ("west", nxt)
                    out[name][k * topo.n_h + y * topo.lh + link] += b
                else:
                    name, link = ("south", here) if step == 1 else ("north", nxt)
                    out[name][k * topo.n_v + x * topo.lv + link] += b
                here = nxt
            if axis == "x":
                x = here
    return out


@settings(max_examples=25, deadline=None)
@given(st.integers(3, 6), st.integers(3, 7), st.data())
def test_torus_routes_match_brute_force(rows: int, cols: int, data) -> None:
    topo = grid_mesh(rows * cols, rows, cols, mesh_torus=True)
    assert topo.wrap_x and topo.wrap_y and (topo.lh, topo.lv) == (cols, rows)
    n = rows * cols
    src = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=20)))
    dst = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=src.size, max_size=src.size)))
    nbytes = np.arange(1, src.size + 1, dtype=float) * 100
    got, want = link_loads(topo, src, dst, nbytes), brute_force_loads(topo, src, dst, nbytes)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], err_msg=name)


def test_torus_route_takes_the_wrap_link_and_halves_the_distance() -> None:
    B = 8 * KIB  # one chunk
    line, ring = grid_mesh(32, 4, 8), grid_mesh(32, 4, 8, mesh_torus=True)
    bw = line.hw.link_bandwidth
    for topo, hops in ((line, 6), (ring, 2)):  # (0, 0) -> (0, 6): 6 hops east, or 2 west round the ring
        cost = topo.phase([topo.core_at(0, 0, 0)], [topo.core_at(0, 0, 6)], [B])
        assert cost.max_hops == hops
        assert cost.time_s == pytest.approx(B / bw + hops * LAT)
        assert cost.bound_by == "links"
    # (0, 7) -> (0, 0) on the ring: one hop east over the wrap link, id y * cols + 7
    loads = link_loads(ring, [ring.core_at(0, 0, 7)], [ring.core_at(0, 0, 0)], [B])
    assert loads["east"][7] == B and loads["east"].sum() == B and loads["west"].sum() == 0
    # the diameter: (rows - 1) + (cols - 1) on the mesh, rows / 2 + cols / 2 on the torus
    every = np.arange(32)
    src, dst = np.repeat(every, 32), np.tile(every, 32)
    assert line.phase(src, dst, np.full(src.size, 1.0)).max_hops == 3 + 7
    assert ring.phase(src, dst, np.full(src.size, 1.0)).max_hops == 2 + 4


def test_torus_multicast_tree_goes_both_ways_round_the_ring() -> None:
    B = 8 * KIB
    # core (0, 0) multicasts B to the 7 other cores of its row of 8
    for torus, east, west in ((False, 7, 0), (True, 4, 3)):
        topo = grid_mesh(32, 4, 8, mesh_torus=torus)
        dst = np.array([topo.core_at(0, 0, x) for x in range(1, 8)])
        src = np.zeros(dst.size, np.int64)
        cost = topo.phase(src, dst, np.full(dst.size, float(B)), multicast=np.zeros(dst.size, int))
        # every link of the tree carries B once: east to x = 4 (the tie goes east), west to 5
        assert cost.intra_busy_s == pytest.approx(B / topo.hw.link_bandwidth)
        assert cost.max_hops == max(east, west)
        assert cost.time_s == pytest.approx(B / topo.hw.link_bandwidth + max(east, west) * LAT)
        legs = {name: float((w * (e - s)).sum()) for name, s, e, w, _ in topo.tree_routes(
            topo.node_chip[dst], topo.core_y[src], topo.core_x[src], topo.core_y[dst],
            topo.core_x[dst], np.full(dst.size, float(B)), np.zeros(dst.size, int))}
        assert legs == {"east": east * B, "west": west * B, "south": 0.0, "north": 0.0}


def test_interior_controller_feeds_its_column_through_its_node() -> None:
    # an 8 x 4 grid with one HBM controller as the NoC node (0, 1); 31 cores around it
    topo = grid_mesh(31, 8, 4, hbm_bandwidth=1e15, hbm_controllers=1, hbm_placement="nodes:(0,1)")
    assert topo.interior and (topo.ctrl_y[0], topo.ctrl_x[0]) == (0, 1)
    assert topo.io_ports()[0].size == 0  # no edge port
    bw, b = topo.hw.link_bandwidth, 8 * KIB
    for k in (1, 3, 7):  # b distinct bytes to each of the k cores below it on its column
        dst = np.array([topo.core_at(0, y, 1) for y in range(1, k + 1)])
        src, d, nb = topo.io_flows("hbm", dst, np.full(k, float(b)))
        cost = topo.phase(src, d, nb)
        # everything leaves through the controller's south link: k b bytes, the farthest k hops
        assert cost.intra_busy_s == pytest.approx(k * b / bw)
        assert cost.time_s == pytest.approx(k * b / bw + k * LAT)
        assert cost.max_hops == k and cost.bound_by == "controller ports"
        # the same b bytes for all k: one multicast down the column, each link once
        cast = topo.phase(src, d, nb, multicast=np.zeros(k, int))
        assert cast.intra_busy_s == pytest.approx(b / bw)
        assert cast.time_s == pytest.approx(b / bw + k * LAT)


def test_controller_injection_cap_binds() -> None:
    b, k = 8 * KIB, 6
    topo = grid_mesh(31, 8, 4, hbm_bandwidth=1e15, hbm_controllers=1, hbm_placement="nodes:(0,1)",
                     hbm_injection_bandwidth=1e9)
    bw = topo.hw.link_bandwidth
    assert bw > 1e9  # 5.5 GB/s links: the 1 GB/s injection binds
    # 6 cores around the controller: its west, east and south links share the bytes
    dst = np.array([topo.core_at(0, 0, 0), topo.core_at(0, 0, 2), topo.core_at(0, 0, 3),
                    topo.core_at(0, 1, 1), topo.core_at(0, 2, 1), topo.core_at(0, 1, 0)])
    src, d, nb = topo.io_flows("hbm", dst, np.full(k, float(b)))
    cost = topo.phase(src, d, nb)
    assert cost.bound_by == "injection"
    assert cost.intra_busy_s == pytest.approx(k * b / 1e9)
    assert cost.time_s == pytest.approx(k * b / 1e9 + 2 * LAT)
    assert cost.uncontended_s == pytest.approx(b / 1e9 + 2 * LAT)  # one flow alone, capped
    # uncapped, the controller's links bind: 2 b each way (X first: (1, 0) goes west, then down)
    free = grid_mesh(31, 8, 4, hbm_bandwidth=1e15, hbm_controllers=1, hbm_placement="nodes:(0,1)")
    uncapped = free.phase(src, d, nb)
    assert uncapped.intra_busy_s == pytest.approx(2 * b / bw)
    assert uncapped.bound_by == "controller ports"


@pytest.mark.parametrize("rows, cut", [(8, "controller ports"), (12, "links")])
def test_whole_chip_load_from_two_controller_columns(rows: int, cut: str) -> None:
    """Every core reads b distinct bytes, striped over 2 R controllers filling grid columns 1
    and 6 of 8 (one per row each). XY routes leave a controller along its row: the link out
    of column 1 eastward carries the stripes of the 5 core columns east of it, R x 5 cores
    x b / 2R = 5 b / 2. Then down each core column: the south link below row y carries what
    the 2 (y + 1) controllers above sent to the R - 1 - y cores below, (y + 1)(R - 1 - y) b /
    R, at most R b / 4 in the middle: the column bisection. R = 8: the controller ports bind
    (5 b / 2 > 2 b); R = 12: the bisection (3 b > 5 b / 2)."""
    cores = rows * 6
    H = 2 * rows
    b = H * 8 * KIB  # one chunk per stripe
    topo = grid_mesh(cores, rows, 8, hbm_bandwidth=1e15, hbm_controllers=H,
                     hbm_placement="columns:1,6")
    assert sorted(set(topo.core_x.tolist())) == [0, 2, 3, 4, 5, 7]
    assert sorted(zip(topo.ctrl_y.tolist(), topo.ctrl_x.tolist())) == sorted(
        [(y, 1) for y in range(rows)] + [(y, 6) for y in range(rows)])
    bw = topo.hw.link_bandwidth
    dst = np.arange(cores)
    src, d, nb = topo.io_flows("hbm", dst, np.full(cores, float(b)))
    net, source = topo.hbm_load(src, d, nb, None, np.array([float(b * cores)]))
    busiest = max(5 * b / 2, rows * b / 4)
    assert net.intra_busy_s == pytest.approx(busiest / bw)
    assert net.bound_by == cut
    # the farthest core: 6 columns and R - 1 rows from its controller
    assert net.time_s == pytest.approx(busiest / bw + (rows + 5) * LAT)
    assert source == pytest.approx(b * cores / 1e15)


def test_explicit_defaults_reproduce_the_edge_mesh_exactly() -> None:
    """Spelling out the derived grid, edge placement and no torus changes nothing: the phase
    costs (and the controllers' edge ports) of a default mesh are those of today's model."""
    rng = np.random.default_rng(3)
    kw = dict(hbm_bandwidth=1e12, hbm_controllers=4)
    default = mesh(32, **kw)
    explicit = mesh(32, mesh_rows=4, mesh_cols=8, hbm_placement="edge", mesh_torus=False,
                    mesh_reserved="", hbm_injection_bandwidth=0, **kw)
    assert (explicit.rows, explicit.cols) == mesh_shape(32) and not explicit.interior
    assert all((a == b).all() for a, b in zip(default.io_ports(), explicit.io_ports()))
    for group in (None, rng.integers(0, 5, 60)):
        src, dst = rng.integers(0, 32, 60), rng.integers(0, 32, 60)
        nb = rng.integers(1, 20000, 60).astype(float)
        assert default.phase(src, dst, nb, multicast=group) == explicit.phase(src, dst, nb, multicast=group)
        flows = default.io_flows("hbm", dst, nb)
        assert default.hbm_load(*flows, None, np.array([1e6])) == explicit.hbm_load(*flows, None, np.array([1e6]))
    # the edge model's cut is named
    dst = np.arange(32)
    flows = default.io_flows("hbm", dst, np.full(32, 64.0 * KIB))
    assert default.hbm_load(*flows, None, np.array([32 * 64.0 * KIB]))[0].bound_by == "edge ports"


def test_tenstorrent_presets_place_cores_and_dram_as_the_soc_descriptors() -> None:
    wh = make_topology(preset("tt-wormhole"))
    assert (wh.rows, wh.cols) == (12, 10) and wh.wrap_x and wh.wrap_y
    assert set(zip(wh.core_y.tolist(), wh.core_x.tolist())) == {
        (y, x) for x in (1, 2, 3, 4, 6, 7, 8, 9) for y in (1, 2, 3, 4, 5, 7, 8, 9, 10)}  # n150: row 11 fused off
    assert sorted(set(wh.ctrl_x.tolist())) == [0, 5] and wh.num_controllers == 18
    bh = make_topology(preset("tt-blackhole"))
    assert (bh.rows, bh.cols) == (12, 17) and bh.num_cores == 120  # p150: two columns fused off
    assert set(bh.core_x.tolist()) == set(range(1, 8)) | set(range(10, 15))
    assert set(bh.core_y.tolist()) == set(range(2, 12))
    assert sorted(zip(bh.ctrl_y.tolist(), bh.ctrl_x.tolist())) == sorted(
        [(y, 0) for y in range(12)] + [(y, 9) for y in range(12)])
    # a whole-chip load on Wormhole: the 288 GB/s of GDDR6 bind, not the NoC
    hw = wh.hw
    b = 18 * 8 * KIB
    src, d, nb = wh.io_flows("hbm", np.arange(72), np.full(72, float(b)))
    net, source = wh.hbm_load(src, d, nb, None, np.array([72.0 * b]))
    assert source == pytest.approx(72 * b / hw.hbm_bandwidth) and source > net.time_s


def test_reports_name_a_torus():
    from runtime_sim.contract.presets import preset as _preset
    from runtime_sim.machine.topology import make_topology as _make

    mesh = _preset("ipu-pod4-hbm-mesh", num_chips=1, num_cores=1472, hbm_controllers=4,
                   inter_chip_bandwidth=0.0)
    assert _make(mesh).kind == "mesh"
    assert _make(mesh.with_overrides(mesh_torus=True)).kind == "torus"


def test_phase_memo_is_shared_by_chips_differing_in_source_bandwidths_only():
    """A phase is routed over links and ports: chips that differ in HBM or host bandwidth
    share the memo, chips with other links do not; a memoized load equals one costed afresh
    and its source time follows the asking chip's HBM bandwidth."""
    from runtime_sim.machine.topology import make_topology

    base = preset("ipu-pod4-hbm-mesh")
    faster = base.with_overrides(hbm_bandwidth=2 * base.hbm_bandwidth, host_bandwidth=1e10)
    other_links = base.with_overrides(link_bandwidth=2 * base.link_bandwidth)
    a, b, c = make_topology(base), make_topology(faster), make_topology(other_links)
    assert a is not b and a.phase_memo is b.phase_memo and a.phase_memo is not c.phase_memo
    dst = np.arange(0, base.num_cores, 7)
    src, dsts, nbytes, group = a.io_flows("hbm", dst, np.full(dst.size, 4096.0), np.arange(dst.size) % 5)
    unique = np.full(base.num_chips, 1e6)
    net_a, src_a = a.hbm_load(src, dsts, nbytes, group, unique)
    net_b, src_b = b.hbm_load(src, dsts, nbytes, group, unique)
    assert src_b == pytest.approx(src_a / 2)
    fresh = type(a)(base)
    fresh.phase_memo = {}
    assert fresh.hbm_load(src, dsts, nbytes, group, unique) == (net_a, src_a)


def test_byte_hops_are_every_links_bytes() -> None:
    """PhaseCost.byte_hops: on a 4x4 mesh a flow pays one per link of its XY route (0 -> 15:
    3 hops east and 3 south), a multicast tree once per link it uses; the all-to-all exchange
    once per byte delivered."""
    m = mesh(16)
    src, dst = np.array([0, 5]), np.array([15, 6])
    phase = m.phase(src, dst, np.array([100.0, 10.0]))
    assert phase.byte_hops == 100.0 * 6 + 10.0 * 1
    assert phase.byte_hops == sum(float(v.sum()) for v in link_loads(m, src, dst, [100.0, 10.0]).values())
    # 0 -> 1 and 0 -> 2 as one multicast: links 0->1 and 1->2 carry it once each
    tree = m.phase(np.array([0, 0]), np.array([1, 2]), np.array([8.0, 8.0]), multicast=np.array([0, 0]))
    assert tree.byte_hops == 8.0 * 2
    assert a2a(16).phase(src, dst, np.array([100.0, 10.0])).byte_hops == 110.0
    assert (phase + phase).byte_hops == 2 * phase.byte_hops == phase.scaled(2).byte_hops
