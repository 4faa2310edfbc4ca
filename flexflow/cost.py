"""Per-task cost (paper §5, assumption A1 and Table 2's exeTime): analytic from FLOPs and bytes, or measured.

A task's time depends only on its op (kind and hyperparameters), the op's input shapes, the
shape of the output tile it computes and the kind of device it runs on, so times are cached on
that key, as the paper caches measured times. The analytic model is a roofline:

    time = launch_overhead + max(flops / (peak_flops * efficiency[kind]),
                                 bytes / (memory_bandwidth * memory_efficiency))

with per-device-kind constants below. A measured profile (`Profile`, a JSON file) overrides the
analytic time for every key it holds. Transfers cost latency + bytes / bandwidth per link
(assumption A2): `Link.transfer_s` in `flexflow.machine`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flexflow.errors import FlexFlowError
from flexflow.fileio import atomic_write_text, load_json
from flexflow.graph import OpNode, op_attributes
from flexflow.machine_parts import Device
from flexflow.ops.base import Region, region_shape
from flexflow.ops.checks import is_int

PROFILE_FORMAT = "flexflow-profile"
PROFILE_VERSION = 6
"""6: an op reading only model inputs keyed apart from the same op elsewhere (`cost_key`); 5:
also each op's time inside the C step of a whole-model sample split (`native_times`); 4: an op reading only model inputs timed without the input gradient the runtime never
computes; 3: updates timed as data-parallel steps run them (the devices' partial gradients
summed and applied in one C pass); 2: each tile timed with its configuration's tasks running at
once, and update rates (1: tiles timed alone)."""

# Fraction of peak FLOP/s a kernel of each kind reaches. GPU figures are typical of cuDNN/cuBLAS
# on large tiles in FP32 (dense GEMMs reach 70-80% of peak; convolutions 50-70%); element-wise
# and normalization kernels are memory-bound, so their compute efficiency matters little.
GPU_EFFICIENCY: dict[str, float] = {
    "dense": 0.75,
    "batch_matmul": 0.7,
    "lstm": 0.7,
    "multihead_attention": 0.6,
    "conv2d": 0.6,
    "embedding": 0.3,
}
# CPU kernels (numpy/BLAS or our C) on one core: fitted by `benchmarks/cost_fit.py` to the task
# times measured on this project's 2-core host (AVX-512; seven laptop-size zoo models, every
# distinct tile of every configuration on 2 CPUs; benchmarks/results/cost_fit.md): the fraction of
# the core's estimated 80 GFLOP/s a kind's arithmetic reaches and of its estimated 10 GB/s its
# bytes move at. A memory efficiency above 1 is a kind whose tiles mostly stay in cache. The fit
# took data parallelism's simulated iteration from 0.93-1.97x of what the measured profile
# simulates to 0.84-1.37x (typically 49% off to 15%). Batch norm and softmax fit a roofline
# poorly (typically 3x off either way): a measured profile (`--profile`) prices them better.
CPU_EFFICIENCY: dict[str, float] = {
    "dense": 0.89,
    "batch_matmul": 0.4,  # (not fitted: no zoo model has one; the earlier estimate)
    "lstm": 0.45,
    "multihead_attention": 0.45,
    "conv2d": 0.56,
    "embedding": 0.02,
    "batch_norm": 0.063,
    "layer_norm": 0.05,
    "pool2d": 0.02,
    "element_binary": 0.04,
    "element_unary": 0.032,
    "dropout": 0.0022,
    "softmax": 0.0056,
}
CPU_MEMORY_EFFICIENCY: dict[str, float] = {
    "dense": 0.4,
    "lstm": 0.18,
    "multihead_attention": 0.11,
    "conv2d": 0.56,
    "embedding": 0.89,
    "batch_norm": 0.5,
    "layer_norm": 0.4,
    "pool2d": 0.35,
    "element_binary": 5.0,
    "element_unary": 2.2,
    "dropout": 0.22,
    "softmax": 0.14,
    "concat": 3.2,
    "split": 4.0,
    "stack": 2.0,
}
# Kinds in neither table (mean, reduce_sum, flat, reshape, transpose, gather) take the defaults below,
# not fitted; reduce_sum's tiles are mean's without the scale.
CPU_UPDATE_MEMORY_EFFICIENCY = 1.7
"""An optimizer update's bytes move at 17 GB/s on that host (the fitted models' median; 12-29
GB/s: small models' weights stay in cache); also the memory efficiency of kinds not fitted."""
DEFAULT_EFFICIENCY = {"gpu": 0.3, "cpu": 0.15}


@dataclass(frozen=True, slots=True)
class DeviceConstants:
    efficiency: dict[str, float]
    default_efficiency: float
    memory_efficiency: float
    launch_overhead_s: float
    kind_memory_efficiency: dict[str, float] = field(default_factory=dict)
    """Per op kind, its fraction of the memory bandwidth where it differs from
    `memory_efficiency` (which also prices optimizer updates); above 1 where a kind's tiles
    mostly stay in cache."""

    def memory_efficiency_of(self, kind: str) -> float:
        return self.kind_memory_efficiency.get(kind, self.memory_efficiency)


DEVICE_CONSTANTS: dict[str, DeviceConstants] = {
    # A CUDA kernel launch plus Legion's per-task overhead is ~10 us on a GPU.
    "gpu": DeviceConstants(GPU_EFFICIENCY, DEFAULT_EFFICIENCY["gpu"], 0.8, 10e-6),
    # A Legate Python task costs ~175 us on this project's CPUs (shared/notes: 200 launches).
    "cpu": DeviceConstants(
        CPU_EFFICIENCY,
        DEFAULT_EFFICIENCY["cpu"],
        CPU_UPDATE_MEMORY_EFFICIENCY,
        175e-6,
        CPU_MEMORY_EFFICIENCY,
    ),
}


# The CPU time this project's runtime spends on each Legate task of a run on CPU processors,
# beyond its kernel: the Python thread issuing it, the utility thread analysing and mapping
# it, the task body turning its stores into arrays. It runs on the same cores as the kernels
# (`flexflow.bootstrap` gives Legate one CPU processor per core), so an iteration can be no
# shorter than the kernels plus this work spread over the cores (`TaskGraph.iteration_s`).
# Chosen on this project's 2-core host by ordering measured strategies of LeNet and an MLP
# (0.8 of 0.4-1.0 ms; benchmarks/fidelity.py and benchmarks/README.md, "Simulator fidelity").
LEGATE_CPU_TASK_S = 0.8e-3
LEGATE_CPP_TASK_S = 0.3e-3
"""The same for a step task whose body is C++ (flexflow.runtime.native_tasks): no Python turns
its stores into arrays or holds the interpreter lock the other processors wait for, so only
the issuing thread's and Legate's own work remain. Measured, not fitted: the runtime
benchmark's MLP (two such tasks per iteration) used 0.2-0.4 ms of Legate's threads' CPU and
0.2-0.3 ms of the Python thread's per iteration (benchmarks/runtime.py, 2026-12-01)."""


UPDATE_BYTES_PER_ELEMENT = 3 * 4
"""An SGD update reads a float32 weight and its gradient and writes the weight."""


@dataclass(frozen=True, slots=True)
class TaskTime:
    forward_s: float
    backward_s: float


CostKey = tuple[str, str, tuple[tuple[int, ...], ...], tuple[int, ...], str]


NO_INPUT_GRADS = "without_input_gradients"
"""The mark in a cost key's hyperparameters of an op whose backward computes no input gradient
(`OperatorGraph.computes_input_grads`)."""


def cost_key(
    node: OpNode, tile_shape: tuple[int, ...], device_model: str, input_grads: bool = True
) -> CostKey:
    """(kind, hyperparameters, input shapes, output tile shape, device model): what a task's
    time depends on; `input_grads` False (an op reading only model inputs) marks the
    hyperparameters, so such an op and the same op elsewhere are timed apart."""
    attributes = op_attributes(node.op)
    if not input_grads:
        attributes = {**attributes, NO_INPUT_GRADS: True}
    attributes = json.dumps(attributes, sort_keys=True)
    inputs = tuple(spec.shape for spec in node.sig.inputs)
    return (node.kind, attributes, inputs, tuple(tile_shape), device_model)


class StaleProfileError(FlexFlowError):
    """A profile file an older flexflow measured differently: re-measure it."""


@dataclass(frozen=True)
class Profile:
    """Measured task times by cost key, and the bytes per second an optimizer update streams
    by device model (`flexflow.profiler` measures both on this host's CPUs)."""

    times: dict[CostKey, TaskTime] = field(default_factory=dict)
    update_bytes_per_s: dict[str, float] = field(default_factory=dict)
    native_times: dict[CostKey, TaskTime] = field(default_factory=dict)
    """Each op tile's forward and backward inside a training step run as one C call per
    device (`flexflow.step_profiler`): what a strategy whose every op is split the same way
    by sample costs (`SimContext.native_split`). Faster than `times`, the op-by-op task
    bodies' kernels (priced by those, ResNet-20's data parallelism simulated 1.35x its measured
    time: benchmarks/results/fidelity-s33.md)."""

    def merged(self, other: Profile) -> Profile:
        """This profile with `other`'s entries added (`other`'s where both hold a key): one
        file serving several models or batch sizes."""
        return Profile(
            {**self.times, **other.times},
            {**self.update_bytes_per_s, **other.update_bytes_per_s},
            {**self.native_times, **other.native_times},
        )

    def op_by_op(self) -> Profile:
        """This profile without its C step times: every task priced as the op-by-op bodies run
        it (what the planner did before they were measured, for side-by-side comparisons)."""
        return dataclasses.replace(self, native_times={})

    def to_json(self) -> dict[str, Any]:
        return {
            "format": PROFILE_FORMAT,
            "version": PROFILE_VERSION,
            "entries": _entries_json(self.times),
            "updates": [
                {"device": model, "bytes_per_s": rate}
                for model, rate in self.update_bytes_per_s.items()
            ],
            "native_entries": _entries_json(self.native_times),
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        return atomic_write_text(path, json.dumps(self.to_json(), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Profile:
        fix = "re-measure it (`flexflow profile MODEL --out FILE`) or leave it out."
        data = load_json(path, "profile file", FlexFlowError, fix)
        try:
            if not isinstance(data, dict):
                raise ValueError(f"it holds a JSON {type(data).__name__}, not an object")
            version = data.get("version")
            if data.get("format") == PROFILE_FORMAT and version in range(1, PROFILE_VERSION):
                raise StaleProfileError(
                    f"profile file {path} cannot be used: an older flexflow measured it "
                    f"(profile version {version}; this one writes {PROFILE_VERSION}, which times "
                    "each tile as the runtime runs it, beside its configuration's other tasks "
                    "and without input gradients nothing reads, keyed apart from those with "
                    "them, updates as the runtime applies them, and each op inside data "
                    "parallelism's C step); re-measure it (remove "
                    "the file and rerun, or `flexflow profile MODEL --out FILE`)."
                )
            if (
                data.get("format") == PROFILE_FORMAT
                and is_int(version)
                and version > PROFILE_VERSION
            ):
                raise ValueError(
                    f"a newer flexflow wrote it (profile version {version}; this one reads "
                    f"{PROFILE_VERSION}): upgrade flexflow, or re-measure it with this one"
                )
            if data.get("format") != PROFILE_FORMAT or version != PROFILE_VERSION:
                raise ValueError(f"expected format {PROFILE_FORMAT!r} version {PROFILE_VERSION}")
            if "entries" not in data:
                raise ValueError('it has no "entries" list of task times')
            times = _entries(data["entries"])
            native = _entries(data.get("native_entries", []), "native_entries")
            rates = _update_rates(data.get("updates", []))
        except (ValueError, TypeError, AttributeError, OverflowError) as exc:
            raise FlexFlowError(f"profile file {path} cannot be used: {exc}; {fix}") from None
        return cls(times, rates, native)


def _entries_json(times: Mapping[CostKey, TaskTime]) -> list[dict[str, Any]]:
    return [
        {
            "kind": k[0],
            "attributes": json.loads(k[1]),
            "inputs": [list(s) for s in k[2]],
            "tile": list(k[3]),
            "device": k[4],
            "forward_s": t.forward_s,
            "backward_s": t.backward_s,
        }
        for k, t in times.items()
    ]


ENTRY_FIELDS = ("kind", "attributes", "inputs", "tile", "device", "forward_s", "backward_s")
"""The fields of a profile entry (`_entries_json`)."""


def _entries(entries: Any, field: str = "entries") -> dict[CostKey, TaskTime]:
    """`_entries_json`'s list read back; a ValueError names the entry and what is wrong."""
    if not isinstance(entries, list):
        raise ValueError(f'"{field}" must be a list of task times, got {type(entries).__name__}')
    times: dict[CostKey, TaskTime] = {}
    for index, e in enumerate(entries):
        where = f'"{field}" entry {index}'
        if not isinstance(e, dict) or set(e) != set(ENTRY_FIELDS):
            got = sorted(e) if isinstance(e, dict) else type(e).__name__
            raise ValueError(f"{where} must be an object with fields {ENTRY_FIELDS}; got {got}")
        where += f" ({e['kind']!r})" if isinstance(e["kind"], str) else ""
        if not (isinstance(e["kind"], str) and isinstance(e["device"], str)):
            raise ValueError(f'{where}: "kind" and "device" must be strings')
        if not isinstance(e["attributes"], dict):
            raise ValueError(f'{where}: "attributes" must be an object')
        if not (
            _ints(e["tile"]) and isinstance(e["inputs"], list) and all(map(_ints, e["inputs"]))
        ):
            raise ValueError(f'{where}: "tile" and each of "inputs" must be lists of integers')
        for name in ("forward_s", "backward_s"):
            value = e[name]
            if not (type(value) in (int, float) and 0 <= value < math.inf):
                raise ValueError(
                    f"{where}: {name} must be finite non-negative seconds, got {value!r}"
                )
        key = (
            e["kind"],
            json.dumps(e["attributes"], sort_keys=True),
            tuple(tuple(s) for s in e["inputs"]),
            tuple(e["tile"]),
            e["device"],
        )
        time = TaskTime(float(e["forward_s"]), float(e["backward_s"]))
        if times.get(key, time) != time:
            raise ValueError(f"{where} times the same task as an earlier entry, differently")
        times[key] = time
    return times


def _update_rates(updates: Any) -> dict[str, float]:
    """The "updates" list read back: bytes per second by device model."""
    if not isinstance(updates, list):
        raise ValueError(f'"updates" must be a list, got {type(updates).__name__}')
    rates = {}
    for index, u in enumerate(updates):
        if not (
            isinstance(u, dict)
            and set(u) == {"device", "bytes_per_s"}
            and isinstance(u["device"], str)
            and type(u["bytes_per_s"]) in (int, float)
            and 0 < u["bytes_per_s"] < math.inf
        ):
            raise ValueError(
                f'"updates" entry {index} must be {{"device": a name, "bytes_per_s": a positive '
                f"finite number}}, got {u!r}"
            )
        rates[u["device"]] = float(u["bytes_per_s"])
    return rates


def _ints(values: Any) -> bool:
    return isinstance(values, list) and all(type(v) is int for v in values)


class CostModel:
    """Task and transfer times; caches every task time it computes (one instance per search)."""

    def __init__(
        self,
        profile: Profile | None = None,
        constants: Mapping[str, DeviceConstants] = DEVICE_CONSTANTS,
    ) -> None:
        """`constants`: per device kind, the analytic roofline's (`benchmarks/cost_fit.py`
        compares fitted ones with these)."""
        self.profile = profile or Profile()
        self.constants = constants
        self._cache: dict[CostKey, TaskTime] = {}

    def task_time(
        self, node: OpNode, region: Region, device: Device, input_grads: bool = True
    ) -> TaskTime:
        """The tile's (forward, backward): the profile's, else the analytic roofline's;
        `input_grads` as for `cost_key`."""
        key = cost_key(node, region_shape(region), device.model, input_grads)
        cached = self._cache.get(key)
        if cached is None:
            cached = self.profile.times.get(key) or self._analytic(node, region, device)
            self._cache[key] = cached
        return cached

    def native_time(
        self, node: OpNode, region: Region, device: Device, input_grads: bool = True
    ) -> TaskTime | None:
        """The op tile's time inside a C step (`Profile.native_times`), None where not measured."""
        key = cost_key(node, region_shape(region), device.model, input_grads)
        return self.profile.native_times.get(key)

    def _analytic(self, node: OpNode, region: Region, device: Device) -> TaskTime:
        constants = self.constants[device.kind]
        efficiency = constants.efficiency.get(node.kind, constants.default_efficiency)
        flops_per_s = device.peak_flops * efficiency
        bytes_per_s = device.memory_bandwidth_bytes_per_s * constants.memory_efficiency_of(
            node.kind
        )
        cost = node.op.tile_cost(node.sig, region)
        forward = max(
            cost.forward_flops / flops_per_s,
            (cost.forward_bytes_read + cost.forward_bytes_written) / bytes_per_s,
        )
        backward = max(
            cost.backward_flops / flops_per_s,
            (cost.backward_bytes_read + cost.backward_bytes_written) / bytes_per_s,
        )
        overhead = constants.launch_overhead_s
        return TaskTime(overhead + forward, overhead + backward)

    def update_time(self, num_elements: int, device: Device) -> float:
        """SGD update of `num_elements` weights: reads weight and gradient, writes the weight,
        at the rate the profile measured for the device's model, else at the device's memory
        bandwidth times its memory efficiency."""
        constants = self.constants[device.kind]
        bandwidth = self.profile.update_bytes_per_s.get(device.model)
        if bandwidth is None:
            bandwidth = device.memory_bandwidth_bytes_per_s * constants.memory_efficiency
        return constants.launch_overhead_s + UPDATE_BYTES_PER_ELEMENT * num_elements / bandwidth
