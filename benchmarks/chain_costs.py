"""Where a Table 4 chain's time goes, and two checkouts compared on the same chains.

Runs Table 4's chains (`table4.random_start_chain`: one MCMC chain from each seed's random
strategy, stopped by the progress rule, each in a fresh simulation context) and reports their
CPU time per proposal. `--breakdown` adds timers around a proposal's stages: the C replay
(`ff_simulate`), the task graph's rebuild (`TaskGraph.set_configs`, less the C block builder,
reported apart), the undo of a rejected proposal, and the rest (the chain's loop and the
evaluator), in wall time; each timer adds about a microsecond to the call it wraps.

`--against PATH` runs the same chains under another checkout too, the two taking turns
`--rounds` times in child processes, and prints the ratio of their CPU times per proposal (the
fastest turn of each) and whether both made the same proposals to the same strategies. This
host's speed drifts by about 10% within minutes, so only such side-by-side ratios compare code.
A checkout of an earlier commit, with this one's .venv (its simulator built from its own C):

    git worktree add /tmp/base REV && cd /tmp/base && ln -s ../ops flexflow/ops
    cp /path/to/this/flexflow/_kernels.abi3.so /path/to/this/flexflow/_cuda_stub.abi3.so flexflow/
    mkdir -p flexflow/lib && cp /path/to/this/flexflow/lib/*.so flexflow/lib/
    /path/to/this/.venv/bin/python -c "import sys; sys.path.insert(0, 'native'); \
        from build_simulator import ffibuilder; ffibuilder.compile(tmpdir='/tmp/base-build')"
    cp /tmp/base-build/flexflow/_simulator*.so flexflow/_simulator.abi3.so

    .venv/bin/python benchmarks/chain_costs.py [--model resnet101] [--machine p100:1]
        [--seeds 0-9] [--breakdown] [--against PATH] [--rounds 3]
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import importlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent

STAGES = {
    "rebuild": "flexflow.simulator.task_deltas:TaskGraphDeltas.set_configs",
    "undo": "flexflow.simulator.schedule:DeltaSimulator.undo",
}
"""Python calls timed by --breakdown (module:qualified name)."""
C_CALLS = {
    "replay": ("flexflow.simulator.native_loop", "ff_simulate"),
    "builder": ("flexflow.simulator.native_blocks", "ff_build_blocks"),
}
"""C calls timed by --breakdown: the module whose `lib` they are called through, the name."""


def seed_list(text: str) -> list[int]:
    """'0-9' or '0,3,5' (or both: '0-2,7') as a list of seeds."""
    seeds = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        seeds += range(int(low), int(high or low) + 1)
    return seeds


class _TimedLib:
    """A cffi `lib` whose calls named in `names` add their seconds to `spent`."""

    def __init__(self, lib, names: dict[str, str], spent: collections.Counter) -> None:
        self._lib, self._names, self._spent = lib, names, spent

    def __getattr__(self, name: str):
        call = getattr(self._lib, name)
        stage = self._names.get(name)
        if stage is None:
            return call
        return _timed(call, stage, self._spent)


def _timed(call: Callable, stage: str, spent: collections.Counter) -> Callable:
    def timed(*args, **kwargs):
        begin = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            spent[stage] += time.perf_counter() - begin

    return timed


def _install_timers(spent: collections.Counter) -> None:
    for stage, path in STAGES.items():
        module, _, qualified = path.partition(":")
        owner = importlib.import_module(module)
        *outer, name = qualified.split(".")
        for part in outer:
            owner = getattr(owner, part)
        setattr(owner, name, _timed(getattr(owner, name), stage, spent))
    by_module: dict[str, dict[str, str]] = collections.defaultdict(dict)
    for stage, (module, name) in C_CALLS.items():
        by_module[module][name] = stage
    for module, names in by_module.items():
        loaded = importlib.import_module(module)
        loaded.lib = _TimedLib(loaded.lib, names, spent)


def run_chains(model: str, machine_name: str, seeds: list[int], breakdown: bool) -> dict:
    """The chains' CPU and wall seconds, proposals, per-stage (wall) seconds and a fingerprint of
    what they found (each chain's proposals, accepted proposals, best cost and strategy);
    `main` has put this directory on the path."""
    from table4 import load_workload, random_start_chain

    from flexflow.machine import parse_machine
    from flexflow.search.spaces import make_space
    from flexflow.simulator import SimContext, TaskGraph, full_simulate
    from flexflow.strategies import named_strategy

    spent: collections.Counter = collections.Counter()
    if breakdown:
        _install_timers(spent)
    graph, machine = load_workload(model), parse_machine(machine_name)
    dp = named_strategy("dp", graph, machine)
    dp_s = full_simulate(TaskGraph(SimContext(graph, machine), dp)).iteration_s
    space = make_space("soap", graph, machine)
    cpu_s, wall_s, proposals, found = 0.0, 0.0, 0, hashlib.sha256()
    for seed in seeds:
        context = SimContext(graph, machine)
        begin, wall = time.process_time(), time.perf_counter()
        chain = random_start_chain(context, space, dp_s, seed, 600.0)
        cpu_s += time.process_time() - begin
        wall_s += time.perf_counter() - wall
        proposals += chain.proposals
        found.update(repr((chain.proposals, chain.accepted, chain.best_s.hex())).encode())
        found.update(repr(chain.best.configs).encode())
    return {
        "cpu_s": cpu_s,
        "wall_s": wall_s,
        "proposals": proposals,
        "spent": dict(spent),
        "fingerprint": found.hexdigest(),
    }


def _child(checkout: Path, args: argparse.Namespace) -> dict:
    """`run_chains` under `checkout`'s flexflow, in a child process."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    command = [sys.executable, str(HERE / "chain_costs.py"), "--child", "--model", args.model,
               "--machine", args.machine, "--seeds", args.seeds]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"the chains under {checkout} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _per_proposal_us(result: dict, seconds: float) -> float:
    return 1e6 * seconds / max(1, result["proposals"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet101", help="a zoo model or resnet101_flexflow")
    parser.add_argument("--machine", default="p100:1")
    parser.add_argument("--seeds", default="0-9", help="e.g. 0-9 or 0,3,5 (default 0-9)")
    parser.add_argument("--breakdown", action="store_true", help="time a proposal's stages")
    parser.add_argument("--against", type=Path, help="another checkout to compare with")
    parser.add_argument("--rounds", type=int, default=3, help="turns each with --against")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    try:
        seeds = seed_list(args.seeds)
    except ValueError:
        parser.error(f"--seeds takes '0-9' or '0,3,5', got {args.seeds!r}")
    if args.against is not None and not (args.against / "flexflow" / "__init__.py").is_file():
        parser.error(f"--against {args.against}: no flexflow package there")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    sys.path.insert(0, str(HERE))
    from table4 import load_workload

    from flexflow.errors import FlexFlowError
    from flexflow.machine import parse_machine

    try:  # a bad name is an error message here, not a child's traceback
        load_workload(args.model), parse_machine(args.machine)
    except FlexFlowError as error:
        parser.error(str(error))
    if args.child:
        print(json.dumps(run_chains(args.model, args.machine, seeds, False)))
        return
    if args.against is None:
        result = run_chains(args.model, args.machine, seeds, args.breakdown)
        total = result["cpu_s"]
        print(f"{args.model} on {args.machine}, seeds {args.seeds}: {result['proposals']:,} "
              f"proposals, {total:.2f} s CPU, {_per_proposal_us(result, total):.1f} us a "
              "proposal")  # fmt: skip
        if args.breakdown:
            spent, wall = result["spent"], result["wall_s"]
            print(f"  per stage (wall time, {_per_proposal_us(result, wall):.1f} us a proposal):")
            rebuild = spent.get("rebuild", 0.0) - spent.get("builder", 0.0)
            rest = wall - spent.get("rebuild", 0.0) - spent.get("replay", 0.0)
            rest -= spent.get("undo", 0.0)
            for stage, seconds in (("C replay (ff_simulate)", spent.get("replay", 0.0)),
                                   ("rebuild, Python", rebuild),
                                   ("rebuild, C block builder", spent.get("builder", 0.0)),
                                   ("undo", spent.get("undo", 0.0)),
                                   ("chain loop and evaluator", rest)):  # fmt: skip
                print(f"  {stage:28s} {_per_proposal_us(result, seconds):7.1f} us a proposal")
        return
    here = HERE.parent
    times: dict[str, list[float]] = {"this": [], "against": []}
    prints = set()
    for _ in range(args.rounds):
        for name, checkout in (("against", args.against), ("this", here)):
            result = _child(checkout, args)
            times[name].append(_per_proposal_us(result, result["cpu_s"]))
            prints.add(result["fingerprint"])
    this, against = min(times["this"]), min(times["against"])
    print(f"{args.model} on {args.machine}, seeds {args.seeds}, {args.rounds} turns each "
          f"(CPU us a proposal, the fastest turn): this checkout {this:.1f} "
          f"({', '.join(f'{t:.1f}' for t in times['this'])}), {args.against} {against:.1f} "
          f"({', '.join(f'{t:.1f}' for t in times['against'])}): ratio {this / against:.3f}; "
          f"{'the same' if len(prints) == 1 else 'DIFFERENT'} proposals and strategies")  # fmt: skip


if __name__ == "__main__":
    main()
