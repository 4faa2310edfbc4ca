"""Strategy files (JSON, versioned): export atomically, import with every problem reported by op name.

    {"format": "flexflow-strategy", "version": 1, "model": "lenet", "machine": "p100:1",
     "num_devices": 4, "batch_size": 64,
     "ops": [{"name": "conv2d_1", "degrees": {"sample": 2, "channel": 2}, "devices": [0, 1, 2, 3]},
             ...]}

Degrees are keyed by dimension name; a dimension left out has degree 1. `batch_size` (the
model inputs' samples per batch; files written before it have none) is checked as the machine
is: a strategy searched for another batch size or machine loads with a warning.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import warnings
from pathlib import Path
from typing import Any

from flexflow.errors import FlexFlowWarning, StrategyError
from flexflow.fileio import atomic_write_text, load_json
from flexflow.graph import OperatorGraph, OpNode
from flexflow.machine import Machine
from flexflow.space import config_problems
from flexflow.strategy import ParallelConfig, Strategy

STRATEGY_FORMAT = "flexflow-strategy"
STRATEGY_VERSION = 1
ENTRY_KEYS = frozenset({"name", "degrees", "devices"})
FILE_KEYS = frozenset({"format", "version", "model", "machine", "num_devices", "batch_size", "ops"})
"""The top-level fields of a strategy file (`strategy_to_json`)."""


def op_entry(node: OpNode, config: ParallelConfig) -> dict[str, Any]:
    """One op's entry of a strategy file's `ops`: its name, its degree on each partitionable
    dimension by name, its devices."""
    degrees = {
        dim.name: degree
        for dim, degree in zip(node.sig.dims, config.degrees, strict=True)
        if dim.partitionable
    }
    return {"name": node.name, "degrees": degrees, "devices": list(config.devices)}


def strategy_to_json(
    strategy: Strategy, graph: OperatorGraph, machine: Machine, model: str = ""
) -> dict[str, Any]:
    ops = [op_entry(node, config) for node, config in zip(graph.ops, strategy.configs, strict=True)]
    return {
        "format": STRATEGY_FORMAT,
        "version": STRATEGY_VERSION,
        "model": model,
        "machine": machine.name,
        "num_devices": machine.num_devices,
        "batch_size": batch_size(graph),
        "ops": ops,
    }


def batch_size(graph: OperatorGraph) -> int | None:
    """The samples per batch of the model's inputs (their first dimension); None without any."""
    inputs = graph.input_tensors
    return inputs[0].spec.shape[0] if inputs and inputs[0].spec.shape else None


def export_strategy(
    path: str | os.PathLike[str],
    strategy: Strategy,
    graph: OperatorGraph,
    machine: Machine,
    model: str = "",
) -> Path:
    text = json.dumps(strategy_to_json(strategy, graph, machine, model), indent=1)
    return atomic_write_text(path, text + "\n")


def validate_strategy(strategy: Strategy, graph: OperatorGraph, machine: Machine) -> None:
    """Raise StrategyError listing every problem of `strategy` for `graph` on `machine`."""
    problems: list[str] = []
    if strategy.ops != tuple(n.name for n in graph.ops):
        known = set(strategy.ops)
        problems += [
            f"op '{n.name}' has no configuration; add one."
            for n in graph.ops
            if n.name not in known
        ]
        names = {n.name for n in graph.ops}
        problems += [
            f"unknown op '{name}': the model has no such op; remove it."
            for name in strategy.ops
            if name not in names
        ]
    else:
        for node, config in zip(graph.ops, strategy.configs, strict=True):
            problems += config_problems(node, config, machine)
    _raise(problems, "strategy")


def _raise(problems: list[str], source: str) -> None:
    if problems:
        listing = "\n  ".join(problems)
        raise StrategyError(
            f"{source} is not valid ({len(problems)} problem(s)):\n  {listing}", problems
        )


def _config_from_entry(
    node: OpNode, entry: dict[str, Any], problems: list[str]
) -> ParallelConfig | None:
    """The entry's configuration, or None after appending what is wrong with it to `problems`."""
    label = f"{node.kind} '{node.name}'"
    unknown = sorted(set(entry) - ENTRY_KEYS)
    if unknown:
        problems.append(
            f"{label}: unknown field(s) {', '.join(map(repr, unknown))}; an entry holds "
            '"name", "degrees" and "devices".'
        )
        return None
    degrees_in = entry.get("degrees", {})
    devices = entry.get("devices")
    if not isinstance(degrees_in, dict) or not isinstance(devices, list):
        problems.append(
            f'{label}: needs "devices" (a list) and, where it splits, "degrees" (an object by '
            'dimension name; one left out, or no "degrees", is not split).'
        )
        return None
    found = len(problems)
    names = [d.name for d in node.sig.dims]
    for key, value in degrees_in.items():
        if key not in names:
            problems.append(
                f"{label}: has no dimension '{key}' (dimensions: {', '.join(names)}); remove it."
            )
        elif not isinstance(value, int) or isinstance(value, bool) or value < 1:
            problems.append(
                f"{label}: degree of '{key}' must be a positive integer, got {value!r}."
            )
    if not all(isinstance(d, int) and not isinstance(d, bool) for d in devices):
        problems.append(f"{label}: devices must be integer device ids, got {devices!r}.")
    if len(problems) > found:
        return None
    degrees = tuple(degrees_in.get(name, 1) for name in names)
    if len(devices) != math.prod(degrees):
        problems.append(
            f"{label}: degrees {dict(zip(names, degrees, strict=True))} make {math.prod(degrees)} "
            f"tasks but {len(devices)} devices are listed; list one device per task."
        )
        return None
    return ParallelConfig(degrees, tuple(devices))


def strategy_from_json(
    data: Any, graph: OperatorGraph, machine: Machine, source: str = "strategy"
) -> Strategy:
    """Parse and validate; raises StrategyError listing every problem found."""
    if not isinstance(data, dict) or data.get("format") != STRATEGY_FORMAT:
        raise StrategyError(
            f'{source}: not a strategy file (expected "format": "{STRATEGY_FORMAT}").'
        )
    if data.get("version") != STRATEGY_VERSION:
        version = data.get("version")
        got = "has no version" if version is None else f"has version {version!r}"
        raise StrategyError(
            f'{source} {got}; this flexflow reads "version": {STRATEGY_VERSION} (a number): '
            "re-export it with `flexflow strategy ... --export`."
        )
    problems: list[str] = []
    unknown = sorted(set(data) - FILE_KEYS)
    if unknown:
        problems.append(
            f"unknown top-level field(s) {', '.join(map(repr, unknown))}; a strategy file holds "
            f"{', '.join(map(repr, sorted(FILE_KEYS)))}."
        )
    for key, kind, noun in (("model", str, "a string"), ("machine", str, "a string"),
                            ("num_devices", int, "an integer"),
                            ("batch_size", int, "an integer")):  # fmt: skip
        value = data.get(key)
        if value is not None and type(value) is not kind:
            problems.append(f'"{key}" must be {noun}, got {value!r}.')
    entries = data.get("ops")
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and isinstance(e.get("name"), str) for e in entries
    ):
        _raise([*problems, '"ops" must be a list of objects with a "name".'], source)
    by_name: dict[str, dict[str, Any]] = {}
    for entry in entries:
        if entry["name"] in by_name:
            problems.append(f"op '{entry['name']}' is listed twice; keep one entry.")
        by_name[entry["name"]] = entry
    graph_names = {n.name for n in graph.ops}
    foreign = [name for name in by_name if name not in graph_names]
    # another model's: one line, not one per op (models of one family share a few op names)
    if by_name and (
        len(foreign) == len(by_name) or (2 * len(foreign) > len(by_name) and data.get("model"))
    ):
        named = f" (it names model {data['model']!r})" if data.get("model") else ""
        count = "none" if len(foreign) == len(by_name) else f"only {len(by_name) - len(foreign)}"
        raise StrategyError(
            f"{source} is another model's strategy{named}: {count} of its {len(by_name)} ops "
            f"{'is' if count == 'none' else 'are'} among this model's {len(graph_names)}; "
            "export one for this model (`flexflow strategy MODEL --machine M --export FILE`)."
        )
    problems += [
        f"unknown op '{name}': model has no such op; remove it."
        for name in by_name
        if name not in graph_names
    ]
    configs: dict[str, ParallelConfig] = {}
    for node in graph.ops:
        entry = by_name.get(node.name)
        if entry is None:
            problems.append(
                f"{node.kind} '{node.name}': has no configuration; add an entry for it."
            )
            continue
        config = _config_from_entry(node, entry, problems)
        if config is not None:
            problems += config_problems(node, config, machine)
            configs[node.name] = config
    devices = data.get("num_devices")
    too_small = f"machine '{machine.name}'"  # in config_problems' device-count and id problems
    larger = type(devices) is int and devices > machine.num_devices
    if problems and larger and all(too_small in problem for problem in problems):  # one line
        raise StrategyError(
            f"{source} was written for machine {data.get('machine', '?')!r} ({devices} devices) "
            f"and this one, {machine.name!r}, has {machine.num_devices}: {len(problems)} "
            f"problem(s) of too few devices (first: {problems[0]}); pass the --machine it was "
            "written for, or search a strategy for this one.",
            problems,
        )
    if problems and isinstance(data.get("model"), str) and data["model"]:  # whose it is
        source = f"{source} (written for model {data['model']!r})"
    _raise(problems, source)
    return Strategy.from_mapping(tuple(n.name for n in graph.ops), configs)


def load_strategy(
    path: str | os.PathLike[str],
    graph: OperatorGraph,
    machine: Machine,
    warn_other_machine: bool = True,
) -> Strategy:
    """The strategy file at `path`, checked against `graph` and `machine`. One written for
    another machine (by name or device count) or batch size is used with a FlexFlowWarning,
    unless `warn_other_machine` is False (a search's starting point: the search adapts it)."""
    fix = "re-export it with `flexflow strategy ... --export`."
    data = load_json(path, "strategy file", StrategyError, fix)
    strategy = strategy_from_json(data, graph, machine, source=f"strategy file '{path}'")
    name, devices = data.get("machine"), data.get("num_devices")
    if warn_other_machine and (
        (name and name != machine.name) or (devices and devices != machine.num_devices)
    ):
        written_for = f"'{name or '?'}'" + (f" ({devices} devices)" if devices else "")
        used_on = f"'{machine.name}' ({machine.num_devices} devices)"
        warnings.warn(
            FlexFlowWarning(
                f"strategy file '{path}' was written for machine {written_for} and is used on "
                f"{used_on}: its configurations fit, but were chosen for the other machine's "
                f"devices and links; search again ({_search_command(data.get('model'), machine, path)}) "
                "for one made for this machine."
            ),
            stacklevel=2,
        )
    written, batch = data.get("batch_size"), batch_size(graph)
    if warn_other_machine and written and batch and written != batch:
        warnings.warn(
            FlexFlowWarning(
                f"strategy file '{path}' was written for batches of {written} and this model "
                f"takes batches of {batch}: its configurations fit, but a strategy searched for "
                "one batch size's task times may not suit another; search again "
                f"({_search_command(data.get('model'), machine, path, batch)}) for one made for "
                "this batch size."
            ),
            stacklevel=2,
        )
    return strategy


def _search_command(
    model: Any, machine: Machine, path: str | os.PathLike[str], batch: int | None = None
) -> str:
    """The `flexflow search` that makes a strategy for `machine` (and `batch` samples a batch)
    from the file at `path`: the file's model where it names a zoo model, else MODEL (a model
    file's stem is not a name)."""
    from flexflow.zoo import ZOO

    named = model if isinstance(model, str) and model in ZOO else "MODEL"
    batch_flag = f" --batch-size {batch}" if batch else ""
    return (
        f"`flexflow search {named} --machine {shlex.quote(machine.name)}{batch_flag} "
        f"--init {shlex.quote(str(path))}`"
    )
