"""Machine files (paper §5's device topology D, written down): a `Machine` as JSON in the
`flexflow-machine` format, and read back with one error naming every problem found.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from flexflow.errors import MachineError
from flexflow.fileio import DuplicateKeyError, unique_keys
from flexflow.machine_parts import DEVICE_RULES, LINK_RULES, Device, Link

if TYPE_CHECKING:
    from flexflow.machine import Machine

MACHINE_FORMAT = "flexflow-machine"
MACHINE_VERSION = 1


def machine_to_json(machine: Machine) -> dict[str, Any]:
    """`machine` as the JSON object of its file (`Machine.to_json`)."""
    return {
        "format": MACHINE_FORMAT,
        "version": MACHINE_VERSION,
        "name": machine.name,
        "devices": [{key: getattr(d, key) for key in DEVICE_RULES} for d in machine.devices],
        "switches": list(machine.switches),
        "links": [{key: getattr(link, key) for key in LINK_RULES} for link in machine.links],
    }


def machine_json(text: str, source: str) -> Any:
    """The JSON value of a machine file's text (`Machine.loads`); a MachineError names what
    keeps it from being one."""
    try:
        data = json.loads(text, object_pairs_hook=unique_keys)
    except DuplicateKeyError as exc:
        raise MachineError(
            f"{source} gives {exc.key!r} twice in one object (JSON readers keep either "
            "value); keep one."
        ) from None
    except RecursionError:
        raise MachineError(f"{source}: its JSON nests too deeply to be one.") from None
    except json.JSONDecodeError as exc:
        if not text.strip():
            raise MachineError(
                f"{source} is empty; a machine file is a JSON object in the "
                f"{MACHINE_FORMAT!r} format (`flexflow machines --json` prints examples)."
            ) from None
        if exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string"):
            raise MachineError(
                f"{source}: the JSON is truncated (it ends at line {exc.lineno} column "
                f"{exc.colno} inside a value); write the whole file again."
            ) from None
        raise MachineError(
            f"{source}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            f"a machine file is a JSON object in the {MACHINE_FORMAT!r} format."
        ) from None
    return data


def _entry(cls: type, label: str, raw: Any, rules: dict[str, tuple], problems: list[str]) -> Any:
    """Build one Device or Link from its JSON entry, or return None after noting its problems."""
    if not isinstance(raw, dict):
        problems.append(f"{label} must be a JSON object, got {raw!r:.60}")
        return None
    missing = [key for key in rules if key not in raw]
    unknown = [key for key in raw if key not in rules]
    problems += [f"{label} is missing field {key!r}" for key in missing]
    problems += [
        f"{label} has unknown field {key!r} (fields: {', '.join(rules)})" for key in unknown
    ]
    if missing or unknown:
        return None
    try:
        return cls(**raw)
    except MachineError as exc:
        problems.append(str(exc).removesuffix("; fix its description."))
        return None


def machine_from_json(cls: type[Machine], data: Any, source: str) -> Machine:
    """`cls` rebuilt from `machine_to_json` output (`Machine.from_json`); one MachineError
    names every problem found."""

    def fail(problems: list[str]) -> MachineError:
        numbered = "; ".join(f"({i}) {p}" for i, p in enumerate(problems, 1))
        return MachineError(
            f"{source} is invalid, {len(problems)} problem(s): {numbered}; fix the file "
            "(`flexflow machines --json` prints valid examples)."
        )

    machines = isinstance(data, list) and data and all(isinstance(m, dict) for m in data)
    if machines and len(data) == 1:  # `flexflow machines --json NAME > FILE`
        data = data[0]
    elif machines:
        raise fail([
            f"it holds a list of {len(data)} machines (as `flexflow machines --json` prints "
            "them); keep the one you mean, as one JSON object or a list of one"
        ])  # fmt: skip
    if not isinstance(data, dict):
        raise fail([f"expected a JSON object, got {type(data).__name__}"])
    if data.get("format") != MACHINE_FORMAT:
        raise fail([f"format is {data.get('format')!r}, expected {MACHINE_FORMAT!r}"])
    if data.get("version") != MACHINE_VERSION:
        version = data.get("version")
        raise fail(
            [f"version {version!r} is not supported (this flexflow reads {MACHINE_VERSION})"]
        )
    problems: list[str] = []
    expected = {"format", "version", "name", "devices", "switches", "links"}
    problems += [f"missing field {key!r}" for key in sorted(expected - data.keys())]
    problems += [f"unknown field {key!r}" for key in sorted(data.keys() - expected)]
    if "name" in data and (not isinstance(data["name"], str) or not data["name"]):
        problems.append(f"field 'name' must be a non-empty string, got {data['name']!r:.60}")
    for key in ("devices", "switches", "links"):
        if key in data and not isinstance(data[key], list):
            problems.append(f"field {key!r} must be a JSON list, got {data[key]!r:.60}")
    if problems:
        raise fail(problems)
    for i, switch in enumerate(data["switches"]):
        if not isinstance(switch, str) or not switch:
            problems.append(f"switch {i} must be a non-empty string, got {switch!r:.60}")
    devices = [
        _entry(Device, f"device {i}", raw, DEVICE_RULES, problems)
        for i, raw in enumerate(data["devices"])
    ]
    links = [
        _entry(Link, f"link {i}", raw, LINK_RULES, problems) for i, raw in enumerate(data["links"])
    ]
    if problems:
        raise fail(problems)
    try:
        return cls(data["name"], tuple(devices), tuple(data["switches"]), tuple(links))
    except MachineError as exc:
        raise MachineError(f"{source}: {exc}") from None
