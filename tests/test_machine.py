"""The machine model (§5's device topology D): presets, routes, machine files, `local`, the CLI."""

from __future__ import annotations

import copy
import json
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexflow.cli import main
from flexflow.errors import FlexFlowError, MachineError
from flexflow.machine import Machine, parse_machine
from flexflow.machine_parts import Device, Link
from flexflow.machine_presets import (
    NODE_PRESETS,
    PRESET_EXAMPLES,
    dgx_h100_machine,
    k80_machine,
    local_machine,
    p100_machine,
    parse_legate_config,
)

# ---- presets: counts ---------------------------------------------------------------------------

# (devices, switches, links) for N nodes, counted by hand from each preset's docstring:
# p100: 4 GPUs; NIC per node + IB switch; 6 NVLink pairs + 4 GPU-NIC + 1 NIC-IB, x2 directions.
# k80: 4 GPUs; 2 PCIe switches + host + NIC per node + IB switch; (4 + 2 + 1 + 1) x 2 links.
# dgx-h100, dgx-h200: 8 GPUs; NVSwitch + 8 NICs per node + IB switch; (8 + 8 + 8) x 2 links.
COUNTS = {
    "p100": lambda n: (4 * n, n + 1, 22 * n),
    "k80": lambda n: (4 * n, 4 * n + 1, 16 * n),
    "dgx-h100": lambda n: (8 * n, 9 * n + 1, 48 * n),
    "dgx-h200": lambda n: (8 * n, 9 * n + 1, 48 * n),
}


@pytest.mark.parametrize("nodes", [1, 2, 4])
@pytest.mark.parametrize("preset", sorted(COUNTS))
def test_preset_counts(preset, nodes):
    machine = parse_machine(f"{preset}:{nodes}")
    assert machine.name == f"{preset}:{nodes}"
    assert (machine.num_devices, len(machine.switches), len(machine.links)) == COUNTS[preset](nodes)
    assert machine.num_nodes == nodes
    per_node = machine.num_devices // nodes
    for node in range(nodes):
        on_node = machine.devices_on_node(node)
        assert [d.node for d in on_node] == [node] * per_node
        assert all(d.name.startswith(f"n{node}.gpu") and d.kind == "gpu" for d in on_node)
    assert [d.id for d in machine.devices] == list(range(machine.num_devices))


def test_preset_constants_follow_the_datasheets():
    p100, k80, h100 = (m.devices[0] for m in (p100_machine(), k80_machine(), dgx_h100_machine()))
    assert (p100.peak_flops, p100.memory_bandwidth_bytes_per_s) == (10.6e12, 732e9)
    assert (k80.peak_flops, k80.memory_bandwidth_bytes_per_s) == (4.365e12, 240e9)
    assert (h100.peak_flops, h100.memory_bandwidth_bytes_per_s) == (67e12, 3.35e12)
    assert [d.memory_bytes // 2**30 for d in (p100, k80, h100)] == [16, 12, 80]
    kinds = {link.kind: link.bandwidth_bytes_per_s for link in p100_machine().links}
    assert kinds == {"nvlink": 20e9, "pcie": 12e9, "infiniband": 12.5e9}


# ---- routes ------------------------------------------------------------------------------------


def _check_chain(machine: Machine, src: int, dst: int) -> None:
    """A route leaves src, enters dst, is contiguous, and passes through switches only."""
    path = machine.route(src, dst)
    names = [machine.device(src).name] + [link.dst for link in path]
    assert [link.src for link in path] == names[:-1]
    assert names[-1] == machine.device(dst).name
    assert set(names[1:-1]) <= set(machine.switches)


def test_p100_intra_node_is_one_nvlink_hop():
    machine = p100_machine(2)
    for a in range(4):
        for b in range(4):
            if a != b:
                (link,) = machine.route(a, b)
                assert (link.kind, link.src, link.dst) == ("nvlink", f"n0.gpu{a}", f"n0.gpu{b}")
                assert link.name == f"n0.nvlink.gpu{a}->gpu{b}"


def test_p100_inter_node_goes_through_nic_and_ib_switch():
    machine = p100_machine(2)
    path = machine.route(1, 6)  # n0.gpu1 -> n1.gpu2
    assert [link.kind for link in path] == ["pcie", "infiniband", "infiniband", "pcie"]
    assert [link.dst for link in path] == ["n0.nic0", "ib_switch", "n1.nic0", "n1.gpu2"]
    assert min(link.bandwidth_bytes_per_s for link in path) == 12e9  # PCIe x16 < EDR
    expected_s = 2e-6 + 0.5e-6 + 0.5e-6 + 2e-6 + 1e9 / 12e9
    assert machine.transfer_s(1, 6, 1e9) == pytest.approx(expected_s)


def test_k80_same_switch_pair_beats_cross_bridge_pair():
    machine = k80_machine(1)
    same, cross = machine.route(0, 1), machine.route(0, 2)
    assert len(same) < len(cross)
    assert min(link.bandwidth_bytes_per_s for link in same) > min(
        link.bandwidth_bytes_per_s for link in cross
    )
    assert [link.kind for link in same] == ["pcie", "pcie"]
    assert [link.kind for link in cross] == ["pcie", "host_bridge", "host_bridge", "pcie"]
    assert machine.transfer_s(0, 1, 1e8) < machine.transfer_s(0, 2, 1e8)
    assert len(machine.route(2, 3)) == len(same) and len(machine.route(1, 3)) == len(cross)


def test_dgx_h100_routes():
    machine = dgx_h100_machine(2)
    assert [link.dst for link in machine.route(0, 7)] == ["n0.nvswitch", "n0.gpu7"]
    path = machine.route(0, 13)  # n0.gpu0 -> n1.gpu5: NIC of the source GPU, NIC of the target
    assert [link.dst for link in path] == ["n0.nic0", "ib_switch", "n1.nic5", "n1.gpu5"]


@pytest.mark.parametrize("spec", ["p100:2", "k80:2", "dgx-h100:2"])
def test_routes_are_symmetric_and_opposite_directions_share_no_link(spec):
    machine = parse_machine(spec)
    for a in range(machine.num_devices):
        assert machine.route(a, a) == ()
        for b in range(a + 1, machine.num_devices):
            forward, backward = machine.route(a, b), machine.route(b, a)
            assert len(forward) == len(backward) > 0
            assert not {id(link) for link in forward} & {id(link) for link in backward}
            assert not set(forward) & set(backward)
            _check_chain(machine, a, b)
            _check_chain(machine, b, a)


def _machine(
    links: list[tuple[str, str, float]], switches: tuple[str, ...], num_devices: int = 2
) -> Machine:
    devices = tuple(
        Device(i, f"d{i}", "gpu", "test", 0, 1e12, 1e11, 2**30) for i in range(num_devices)
    )
    return Machine(
        "test",
        devices,
        switches,
        tuple(Link(i, f"l{i}", "pcie", s, d, bw, 0.0) for i, (s, d, bw) in enumerate(links)),
    )


def test_route_prefers_fewest_hops_then_bottleneck_then_link_ids():
    back = [("d1", "d0", 1.0)]
    # Two 2-hop paths: via s0 (bottleneck 5) and via s1 (bottleneck 8), plus a slow 3-hop path.
    machine = _machine(
        [("d0", "s0", 5.0), ("s0", "d1", 9.0), ("d0", "s1", 8.0), ("s1", "d1", 8.0),
         ("d0", "s2", 99.0), ("s2", "s3", 99.0), ("s3", "d1", 99.0)] + back,
        ("s0", "s1", "s2", "s3"),
    )  # fmt: skip
    assert [link.name for link in machine.route(0, 1)] == ["l2", "l3"]
    # Same bottleneck on every 3-hop path: the smallest link ids win, even though the path to
    # s2 through l1 (bandwidth 100) is "better" than the one through l0 when considered alone.
    machine = _machine(
        [("d0", "s0", 10.0), ("d0", "s1", 100.0), ("s0", "s2", 10.0), ("s1", "s2", 100.0),
         ("s2", "d1", 10.0)] + back,
        ("s0", "s1", "s2"),
    )  # fmt: skip
    assert [link.name for link in machine.route(0, 1)] == ["l0", "l2", "l4"]


def test_route_never_passes_through_a_third_device():
    devices = tuple(Device(i, f"d{i}", "gpu", "test", 0, 1e12, 1e11, 2**30) for i in range(3))
    pairs = [("d0", "d1"), ("d1", "d2"), ("d0", "sw"), ("sw", "d2")]
    links = [Link(i, f"l{i}", "pcie", s, d, 1e9, 0.0) for i, (s, d) in enumerate(pairs)]
    links += [Link(4 + i, f"r{i}", "pcie", d, s, 1e9, 0.0) for i, (s, d) in enumerate(pairs)]
    machine = Machine("t", devices, ("sw",), tuple(links))
    assert [link.name for link in machine.route(0, 2)] == ["l2", "l3"]  # not d0 -> d1 -> d2


def _spec_route(machine: Machine, src: int, dst: int) -> tuple[str, ...]:
    """The route rule by brute force: every path from src to dst through switches only, of
    the fewest hops, then the widest bottleneck, then the smallest link ids hop by hop."""
    devices = {d.name for d in machine.devices}
    start, goal = machine.devices[src].name, machine.devices[dst].name
    found: list[tuple[Link, ...]] = []
    stack: list[tuple[str, tuple[Link, ...]]] = [(start, ())]
    while stack:
        at, path = stack.pop()
        for link in machine.links:
            if link.src != at or any(link.dst == hop.src for hop in path) or link.dst == start:
                continue
            if link.dst == goal:
                found.append((*path, link))
            elif link.dst not in devices:
                stack.append((link.dst, (*path, link)))
    fewest = min(len(p) for p in found)
    best = min(
        (p for p in found if len(p) == fewest),
        key=lambda p: (-min(link.bandwidth_bytes_per_s for link in p), [link.id for link in p]),
    )
    return tuple(link.name for link in best)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.integers(0, 6), st.sampled_from([1.0, 2.0, 3.0, 5.0])),
        min_size=6,
        max_size=22,
    )
)
def test_routes_follow_the_rule_on_any_topology(edges):
    """Each endpoint keeps only the paths no other beats on both bottleneck and link ids:
    the routes are those of the rule itself, found by enumerating every path."""
    names = ("d0", "d1", "d2", "s0", "s1", "s2", "s3")
    links = [(names[a], names[b], bw) for a, b, bw in edges if a != b]
    hub = [(d, "s0", 1.0) for d in names[:3]] + [("s0", d, 1.0) for d in names[:3]]
    machine = _machine(links + hub, names[3:], 3)  # the hub keeps every device reachable
    for src in range(3):
        for dst in range(3):
            if src != dst:
                route = tuple(link.name for link in machine.route(src, dst))
                assert route == _spec_route(machine, src, dst)


def test_all_routes_of_64_k80_gpus_take_well_under_a_second():
    start = time.perf_counter()
    machine = k80_machine(16)
    hops = [len(machine.route(a, b)) for a in range(64) for b in range(64) if a != b]
    elapsed = time.perf_counter() - start
    assert len(hops) == 4032 and max(hops) == 8 and min(hops) == 2
    assert elapsed < 1.0, f"{elapsed:.2f} s for 4032 routes"
    assert machine.route(0, 63) is machine.route(0, 63)  # cached


# ---- device lookup and validation ---------------------------------------------------------------


def test_device_lookup_errors_name_the_range():
    machine = parse_machine("p100:1")
    assert machine.device(3).name == "n0.gpu3"
    with pytest.raises(MachineError, match=r"machine 'p100:1' has no device 7 \(devices 0-3\)"):
        machine.device(7)
    with pytest.raises(MachineError, match="has no device -1"):
        machine.route(-1, 0)
    with pytest.raises(MachineError, match=r"machine 'p100:1' has no node 1 \(nodes 0-0\)"):
        machine.devices_on_node(1)


def test_values_are_frozen_hashable_and_read_back():
    machine = p100_machine(1)
    assert machine == parse_machine("p100:1") and hash(machine) == hash(p100_machine(1))
    with pytest.raises(AttributeError):
        machine.name = "other"  # type: ignore[misc]
    assert eval(repr(machine.devices[0])) == machine.devices[0]
    assert eval(repr(machine.links[0])) == machine.links[0]
    assert eval(repr(machine)) == machine
    assert "4 x gpu Tesla P100-SXM2" in machine.describe()
    assert "12 x nvlink link: 20 GB/s per direction" in machine.describe()


def test_device_and_link_check_their_fields():
    with pytest.raises(MachineError, match=r"kind must be one of cpu, gpu, got 'tpu'.*peak_flops"):
        Device(0, "n0.tpu0", "tpu", "x", 0, -1.0, 1e9, 2**30)
    with pytest.raises(MachineError, match="latency_s must be a number at least 0 and at most"):
        Link(0, "l", "pcie", "a", "b", 1e9, -1e-6)
    with pytest.raises(MachineError, match="src and dst are both 'a'"):
        Link(0, "l", "pcie", "a", "a", 1e9, 0.0)
    assert Link(0, "l", "pcie", "a", "b", 10, 1).transfer_s(20) == 3.0


def test_machine_lists_every_problem():
    good = p100_machine(1)
    links = list(good.links)
    links[3] = Link(3, links[3].name, "pcie", "n0.gpu0", "n9.nowhere", 1e9, 0.0)
    links[5] = Link(7, links[4].name, "pcie", "n0.gpu0", "n0.nic0", 1e9, 0.0)
    with pytest.raises(MachineError) as info:
        Machine("broken", good.devices, good.switches, tuple(links))
    message = str(info.value)
    assert "machine 'broken' is invalid, 3 problem(s)" in message
    assert "unknown dst 'n9.nowhere'" in message
    assert "at position 5 has id 7" in message
    assert f"the link name {links[4].name!r} is used more than once" in message
    assert isinstance(info.value, FlexFlowError)


# ---- machine files ------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["p100:2", "k80:1", "dgx-h100:1"])
def test_json_round_trip(spec, tmp_path):
    machine = parse_machine(spec)
    assert Machine.from_json(json.loads(json.dumps(machine.to_json()))) == machine
    path = machine.save(tmp_path / "m.json")
    assert Machine.load(path) == machine
    assert parse_machine(str(path)) == machine


def _broken(edit) -> str:
    data = copy.deepcopy(p100_machine(1).to_json())
    edit(data)
    return json.dumps(data)


def _set(path: tuple, value):
    def edit(data):
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit


def _drop_links_into_gpu3(data):
    data["links"] = [link for link in data["links"] if link["dst"] != "n0.gpu3"]
    for i, link in enumerate(data["links"]):
        link["id"] = i


BAD_FILES = {
    "not JSON": ("hello machine", "not JSON (Expecting value at line 1 column 1)"),
    "empty": ("  \n", "is empty"),
    "truncated": (p100_machine(1).dumps()[:200], "the JSON is truncated"),
    "truncated in a string": ('{"format": "flexflow-mach', "the JSON is truncated"),
    "not an object": ("[1, 2]", "expected a JSON object, got list"),
    "wrong format": (
        _broken(_set(("format",), "onnx")),
        "format is 'onnx', expected 'flexflow-machine'",
    ),
    "wrong version": (_broken(_set(("version",), 2)), "version 2 is not supported"),
    "missing field": (
        _broken(lambda d: d["links"][4].pop("latency_s")),
        "link 4 is missing field 'latency_s'",
    ),
    "missing top field": (_broken(lambda d: d.pop("switches")), "missing field 'switches'"),
    "unknown field": (
        _broken(_set(("devices", 0, "flops"), 1)),
        "device 0 has unknown field 'flops'",
    ),
    "unknown endpoint": (
        _broken(_set(("links", 2, "dst"), "n0.gpu9")),
        "link 2 'n0.nvlink.gpu0->gpu2' has unknown dst 'n0.gpu9'",
    ),
    "non-positive bandwidth": (
        _broken(_set(("links", 1, "bandwidth_bytes_per_s"), 0)),
        "link 1 'n0.nvlink.gpu1->gpu0': bandwidth_bytes_per_s must be a number at least 1 and "
        "at most 1e+18 bytes/s, got 0",
    ),
    # accepted before: iteration times became infinite and searches stopped in an assertion
    "vanishing bandwidth": (
        _broken(_set(("links", 1, "bandwidth_bytes_per_s"), 5e-324)),
        "bandwidth_bytes_per_s must be a number at least 1 and at most 1e+18 bytes/s, got 5e-324",
    ),
    "vast latency": (
        _broken(_set(("links", 1, "latency_s"), 1e308)),
        "latency_s must be a number at least 0 and at most 1000 seconds, got 1e+308",
    ),
    "vanishing flops": (
        _broken(_set(("devices", 1, "peak_flops"), 1e-320)),
        "peak_flops must be a number at least 1000 and at most 1e+21 FLOP/s, got 1e-320",
    ),
    "a number of 400 digits": (
        _broken(_set(("devices", 1, "memory_bytes"), 10**400)),
        "memory_bytes must be a positive whole number, got 1000000000000000000000000000000000000...;",
    ),
    # each run priced both as whichever the cost model met first
    "one model, two speeds": (
        _broken(_set(("devices", 2, "peak_flops"), 1e12)),
        "devices 'n0.gpu0' and 'n0.gpu2' are both model 'Tesla P100-SXM2' but differ in "
        "peak_flops; a model names one kind of device",
    ),
    "one model, two kinds": (
        _broken(_set(("devices", 1, "kind"), "cpu")),
        "devices 'n0.gpu0' and 'n0.gpu1' are both model 'Tesla P100-SXM2' but differ in kind",
    ),
    "bad number": (
        _broken(_set(("devices", 2, "memory_bytes"), "16GB")),
        "device 2 'n0.gpu2': memory_bytes must be a positive whole number, got '16GB'",
    ),
    "disconnected device": (
        _broken(_drop_links_into_gpu3),
        "device 'n0.gpu0' has no route to n0.gpu3 (a transfer passes through switches only, "
        "never through another device",
    ),
    "duplicate device names": (
        _broken(_set(("devices", 1, "name"), "n0.gpu0")),
        "the name 'n0.gpu0' is used by more than one device or switch",
    ),
    "duplicate switch names": (
        _broken(_set(("switches",), ["n0.nic0", "n0.nic0", "ib_switch"])),
        "the name 'n0.nic0' is used by more than one device or switch",
    ),
    "device id out of order": (
        _broken(_set(("devices", 1, "id"), 5)),
        "device 'n0.gpu1' at position 1 has id 5",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_machine_file(case, tmp_path):
    text, message = BAD_FILES[case]
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(MachineError, match=re.escape(message)) as info:
        parse_machine(str(path))
    assert str(path) in str(info.value)


def test_bad_machine_file_names_every_problem():
    def two_problems(data):
        data["links"][0]["bandwidth_bytes_per_s"] = -1
        del data["devices"][3]["node"]

    with pytest.raises(MachineError, match="2 problem") as info:
        Machine.loads(_broken(two_problems))
    assert "bandwidth_bytes_per_s must be" in str(info.value)
    assert "device 3 is missing field 'node'" in str(info.value)


def test_machine_file_that_is_missing_or_a_directory(tmp_path):
    with pytest.raises(MachineError, match="does not exist"):
        Machine.load(tmp_path / "nope.json")
    with pytest.raises(MachineError, match="is a directory; pass the path of the file"):
        parse_machine(str(tmp_path))


# ---- parse_machine ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, message",
    [
        ("p100:0", r"machine 'p100:0': the node count must be an integer >= 1, got '0'"),
        ("k80:two", "the node count must be an integer >= 1, got 'two'"),
        ("dgx-h100:", "the node count must be an integer >= 1, got ''"),
        ("p100", "machine 'p100' needs a node count; write 'p100:1'"),
        (
            "tpu:4",
            r"unknown machine 'tpu:4'.*p100:N, k80:N, dgx-h100:N, dgx-h200:N \(N nodes >= 1\), local",
        ),
        ("missing.json", "unknown machine 'missing.json'.*or the path of a machine JSON file"),
    ],
)
def test_parse_machine_errors(spec, message):
    with pytest.raises(MachineError, match=message):
        parse_machine(spec)


def test_presets_table_matches_the_builders():
    assert set(NODE_PRESETS) == {"p100", "k80", "dgx-h100", "dgx-h200"}
    assert PRESET_EXAMPLES == ("p100:1", "k80:1", "dgx-h100:1", "dgx-h200:1", "local")
    with pytest.raises(MachineError, match="nodes must be an integer >= 1, got 0"):
        p100_machine(0)


# ---- local --------------------------------------------------------------------------------------


def test_local_reads_cpus_from_legate_config(monkeypatch):
    monkeypatch.setenv("LEGATE_CONFIG", "--cpus 4 --gpus 0 --logging gpu=none --sysmem 256")
    machine = parse_machine("local")
    assert machine.name == "local" and machine.num_devices == 4 and machine.num_nodes == 1
    assert {d.kind for d in machine.devices} == {"cpu"}
    assert len(machine.links) == 4 * 3 and {link.kind for link in machine.links} == {"memory"}
    assert machine.switches == ()
    (link,) = machine.route(0, 3)
    assert (link.bandwidth_bytes_per_s, link.latency_s) == (10e9, 1e-6)
    assert machine.devices[0].peak_flops == 80e9  # 2 FMA x 8 lanes x 2 FLOP x 2.5 GHz


def test_local_with_gpus_and_nodes(monkeypatch):
    monkeypatch.setenv("LEGATE_CONFIG", "--cpus=2 --gpus=2 --nodes=2")
    machine = local_machine(memory_bytes=8 * 2**30)
    assert machine.num_devices == 8 and machine.num_nodes == 2
    assert [d.name for d in machine.devices_on_node(1)] == [
        "n1.cpu0",
        "n1.cpu1",
        "n1.gpu0",
        "n1.gpu1",
    ]
    assert machine.devices[0].memory_bytes == 4 * 2**30  # the node's memory shared by 2 cores
    assert [link.kind for link in machine.route(2, 3)] == ["nvswitch", "nvswitch"]
    assert [link.kind for link in machine.route(0, 2)] == ["memory", "pcie"]
    inter = machine.route(0, 4)  # n0.cpu0 -> n1.cpu0
    assert [link.dst for link in inter] == [
        "n0.host",
        "n0.nic0",
        "ib_switch",
        "n1.nic0",
        "n1.host",
        "n1.cpu0",
    ]


def test_local_defaults_to_this_hosts_cores(monkeypatch):
    monkeypatch.delenv("LEGATE_CONFIG", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 3)
    machine = local_machine(memory_bytes=3 * 2**30)
    assert [d.name for d in machine.devices] == ["n0.cpu0", "n0.cpu1", "n0.cpu2"]
    assert machine.devices[0].memory_bytes == 2**30
    assert local_machine("--gpus 1", host_cpus=1, memory_bytes=2**30).num_devices == 2


@pytest.mark.parametrize(
    "config, message",
    [
        ("--cpus abc", r"--cpus must be a non-negative integer, got 'abc'"),
        ("--gpus=-1", r"--gpus must be a non-negative integer, got '-1'"),
        ("--nodes", "--nodes has no value"),
        ("--cpus 0 --gpus 0", "gives 0 CPUs and 0 GPUs on 1 node"),
        ("--nodes 0", "on 0 node"),
        ("--cpus '2", "cannot be split into flags"),
    ],
)
def test_local_rejects_bad_legate_config(config, message):
    with pytest.raises(MachineError, match=message):
        parse_legate_config(config, default_cpus=2)


def test_legate_config_later_flags_win_and_others_are_ignored():
    procs = parse_legate_config("--cpus 2 --fbmem 4000 --cpus=5 --omps 1", default_cpus=8)
    assert (procs.cpus, procs.gpus, procs.nodes) == (5, 0, 1)
    assert parse_legate_config(None, default_cpus=8).cpus == 8


# ---- the `flexflow machines` command -----------------------------------------------------------


def test_cli_machines_json_lists_every_preset(capsys):
    assert main(["machines", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in listed] == ["p100:1", "k80:1", "dgx-h100:1", "dgx-h200:1", "local"]
    for data in listed:
        machine = Machine.from_json(data)
        assert len(data["devices"]) == machine.num_devices and len(data["links"]) == len(
            machine.links
        )
    assert Machine.from_json(listed[1]) == k80_machine(1)


def test_what_machines_json_prints_for_one_machine_reads_back_as_its_file(capsys, tmp_path):
    assert main(["machines", "--json", "p100:1"]) == 0
    path = tmp_path / "m.json"
    path.write_text(capsys.readouterr().out)  # a list of one machine
    assert Machine.load(path) == parse_machine("p100:1")
    assert main(["machines", "--json"]) == 0
    path.write_text(capsys.readouterr().out)
    with pytest.raises(MachineError, match="it holds a list of 5 machines"):
        Machine.load(path)


def test_cli_machines_table_and_specs(capsys, tmp_path):
    assert main(["machines"]) == 0
    out = capsys.readouterr().out
    for text in ("p100:1", "k80:1", "dgx-h100:1", "local", "Tesla P100-SXM2", "host_bridge"):
        assert text in out
    path = dgx_h100_machine(2).save(tmp_path / "mine.json")
    assert main(["machines", "k80:4", str(path)]) == 0
    out = capsys.readouterr().out
    assert "k80:4" in out and "dgx-h100:2" in out and "16 x gpu" in out


def test_cli_machines_bad_spec_exits_2(capsys):
    assert main(["machines", "k80:4", "p100:0"]) == 2
    assert "node count must be an integer >= 1" in capsys.readouterr().err


def test_each_device_maps_to_its_kinds_legate_processor():
    from flexflow.machine_presets import local_machine

    machine = local_machine("--cpus 2 --gpus 3")
    kinds = machine.kind_ordinals()
    assert len(kinds) == machine.num_devices == 5
    assert sorted(kinds) == [("cpu", 0), ("cpu", 1), ("gpu", 0), ("gpu", 1), ("gpu", 2)]
    for device, (kind, _) in zip(machine.devices, kinds, strict=True):
        assert device.kind == kind


def test_a_machine_past_the_simulators_size_is_refused_before_it_is_built():
    """p100:1000 ran for minutes past 6 GB; p100:100000 was built device by device."""
    import time

    begin = time.perf_counter()
    with pytest.raises(MachineError, match=r"p100:100000': it has 100,000 or more devices; "):
        parse_machine("p100:100000")
    with pytest.raises(MachineError, match=r"it has 1,028 devices; flexflow simulates machines "
                       r"of at most 1,024"):  # fmt: skip
        parse_machine("p100:257")
    assert time.perf_counter() - begin < 5
    assert parse_machine("p100:256").num_devices == 1024


def test_a_machine_file_giving_a_field_twice_is_refused(tmp_path):
    text = parse_machine("p100:1").dumps()
    doubled = text.replace('"name":', '"name": "x", "name":', 1)
    path = tmp_path / "twice.json"
    path.write_text(doubled)
    with pytest.raises(MachineError, match="gives 'name' twice in one object"):
        parse_machine(str(path))
