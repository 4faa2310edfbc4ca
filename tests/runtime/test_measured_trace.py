"""The measured trace's tracks and names match the simulated trace's (flexflow.runtime.trace)."""

from __future__ import annotations

from flexflow.machine import parse_machine
from flexflow.runtime.passes import Pass
from flexflow.runtime.trace import measured_trace
from flexflow.strategies import named_strategy
from flexflow.zoo import load_model


def _tracks_and_slices(trace: dict) -> tuple[list[str], list[tuple[str, str]]]:
    events = trace["traceEvents"]
    tracks = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    slices = [(tracks[e["tid"]], e["name"]) for e in events if e["ph"] == "X"]
    return [tracks[t] for t in sorted(tracks)], slices


def test_tracks_are_the_devices_in_device_order_whichever_thread_ran_first():
    """Tracks were numbered by the thread that ran a task first, which differs from run to
    run: tile 0's tasks sat on "processor thread 1" in one run and on thread 0 in another."""
    graph = load_model("lenet").graph()
    machine = parse_machine("p100:1")
    strategy = named_strategy("dp", graph, machine)
    timeline = [
        (0, 1, Pass.FORWARD, 0.0, 1.0, 555),  # tile 1 first, on thread 555
        (0, 0, Pass.FORWARD, 0.5, 1.5, 777),
        (-1, 0, Pass.UPDATE, 2.0, 3.0, 777),  # an update inside a C step's call
        (0, 0, Pass.FEED, 2.5, 2.6, 999),  # a thread that ran no op's tile
    ]
    tracks, slices = _tracks_and_slices(measured_trace(graph, timeline, "t", (), strategy, machine))
    assert tracks == ["n0.gpu0", "n0.gpu1", "processor thread 2"]
    assert ("n0.gpu1", "conv1[1].fwd") in slices  # the simulator's task names
    assert ("n0.gpu0", "update [0] (one C call)") in slices
    tracks, _ = _tracks_and_slices(measured_trace(graph, timeline, "t"))
    assert tracks == ["processor thread 0", "processor thread 1", "processor thread 2"]
