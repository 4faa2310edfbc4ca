"""MCMC search over strategies (paper §6): Metropolis-Hastings with delta-simulated costs.

A proposal picks one op uniformly at random and gives it a configuration drawn uniformly from
its space (other than its current one). It is accepted with probability

    min(1, exp(beta * (cost(S) - cost(S*)) / cost(S_dp)))

where costs are simulated iteration times. Dividing by the data-parallel cost makes beta
independent of the model's time scale: with the default beta = 200 a proposal 0.1% (of the
data-parallel time) slower than the current strategy is accepted with probability 0.82, 1%
slower with 0.14 and 3% slower with 0.0025. The default is the best of 5, 20, 50, 200 and 1000
in `benchmarks/beta.py` (LeNet, RNNLM, AlexNet, Inception-v3; 1500 proposals, seeds 0-2):
200 gave the best mean on LeNet and within 2.5% of the best on RNNLM (1000), and no value
changed AlexNet or Inception-v3 at that budget (results in benchmarks/results/beta.md).

The acceptance draw is made before the proposal is simulated: it fixes the cost above which the
proposal is rejected (`acceptance_cutoff`), and the delta simulation stops as soon as a lower
bound of the iteration passes that cost (a device or link busy until t with w seconds of work
still queued ends no earlier than t + w; on CPUs, under the runtime's per-task cost, the cores'
whole work, known before any task is simulated; `DeltaSimulator.change_many`). Most proposals are
rejected, and a much slower one shows it at the first task after the change on the device it
loads. The decisions are those of simulating every proposal whole (a test runs both), so a
seeded chain is the same either way, and the same as with full simulation.

Unrolled layers (an LSTM's time steps: ops sharing one layer and its weights) also get layer
moves: with probability 0.5 a proposal picks such a layer uniformly and gives all its steps one
configuration drawn uniformly from those they can all take, evaluated by one delta simulation
of all the steps' changes together (`DeltaSimulator.change_many`).
Moving a 40-step layer one step at a time needs 40 accepted proposals whose intermediate
strategies (mixed configurations, with transfers between the steps) are usually slower, so the
one-op chain rarely gets there; a layer move does it at once. It is our addition to the paper's
proposal (not reversible on its own: the chain is a search, not an exact sampler of exp(-beta
cost)); graphs without unrolled layers get exactly the paper's proposals. The share 0.5 was
chosen on p100:1, 20 s, seed 0: NMT's best was 46.98 / 46.41 / 44.71 / 42.18 / 41.80 ms with
shares 0.05 / 0.1 / 0.25 / 0.5 / 0.75 (52.89 ms without layer moves; OptCNN's DP 44.66 ms),
RNNLM's 17.19-17.22 ms for all (19.13 ms without).

Half of the one-op proposals (DEFAULT_NEIGHBOUR_MOVES) are neighbour moves instead: the op
takes the current configuration of one of its neighbours (an op it reads from or one reading
it), drawn uniformly among those in its space, or a uniform draw when none is. An op configured like
its neighbours needs no transfers to or from them, but a uniform draw lands on a neighbour's
exact configuration with probability 1 / |space| (1/7,279 for ResNet-101's first convolution
on 64 GPUs), so chains rarely aligned ops they had once mixed. Also our addition (not
reversible on its own). `benchmarks/neighbour_moves.py` runs the same 20 s searches (dp,
expert and random chains, seeds 0-2, before the final descent) with and without them: on
p100:4 they found 1.18x faster strategies (geometric mean; 11 of 12 searches better: RNNTC,
RNNLM and NMT by up to 1.6x, AlexNet by 1-3%), on k80:4 0.99x (6 of 12; NMT 5-14% slower in
all three, for a reason not established: README). From random strategies under the progress rule
(`benchmarks/table4.py`), ResNet-101's chains on p100:1 reached 0.74x DP instead of 0.52x
and NMT's stopped after 33 s instead of 38 s. `neighbour_moves=0` keeps the paper's uniform
draws only.

Half of the one-op proposals on graphs without unrolled layers (DEFAULT_PATH_MOVES,
`path_moves_for`) are path moves, also ours: after the op's configuration is drawn (uniformly
or from a neighbour), a random walk goes on from the op to a neighbour that can take the same
configuration, and from there on with a probability drawn per walk from PATH_CONTINUE (0.75 or
0.97: about 4 or 33 ops where neighbours allow), and every op on the walk gets that
configuration in one delta simulation (`DeltaSimulator.change_many`). Aligning a stretch
of a deep chain one op at a time pays transfers on both sides of each op, so single-op chains
from a random strategy stall far from a good one. Chains from random strategies under the
progress rule (Table 4's protocol, p100:1, seeds 0-2, a throwaway run, 2026-12-01): ResNet-101
reached 0.95-0.97x DP with them against 0.69-0.76x without and stopped after 1.8-4.5 s instead
of 7.5-22.1 s; Inception-v3 0.99-1.00x against 0.75-0.86x. In the default 10 s searches on
p100:4 (`benchmarks/neighbour_moves.py --move path`, seeds 0-1,
benchmarks/results/path_moves.md) the CNNs' results moved by -0.2% to +1.1% but RNNLM's fell
5% with both seeds (RNNTC -2.0% to +0.4%, NMT -3.2% to +6.1%): graphs with unrolled layers,
whose layer moves already change many ops at once, get none by default.
The long walks (session 39): with 0.75 alone, ResNet-101's chains from random strategies on 64
GPUs were still improving when the 120 s cap stopped them (all 3 seeds; 300 s in an earlier
run), since a stretch of its 279-op chain is aligned four ops at a time. In
`benchmarks/path_length.py` (Table 4's protocol, seeds 0-2, AlexNet, Inception-v3, ResNet-101
and the transformer on p100:1 and k80:16; benchmarks/results/path_length-chains.md) 0.97 alone
made the chains 0.38x as long and found ResNet-101's best strategies (1.62x DP on 64 GPUs in
15 s, against 1.47x capped), but worse ones for AlexNet (1.89x against 2.32x) and the
transformer (1.00x against 1.10x) on 64 GPUs, whose best strategies mix configurations a long
walk overwrites; drawing 0.75 or 0.97 per walk made them 0.51x as long at 1.02x the speedup
over data parallelism (geometric mean, 15 of 24 better, 8 worse; the worst, the transformer on
64 GPUs, 1.04x against 1.10x), ResNet-101's 4-GPU chains
2.8x shorter (1.90 s against 5.25, 0.998x DP against 0.975x) and its 64-GPU ones 1.9x
(64 s, one of three still at the cap; 1.50x DP). The default searches barely moved: 10 s
searches of the same models on p100:4 and k80:4 (seeds 0-1, before the final descent;
benchmarks/results/path_length-searches.md) found 1.001x the speedup (5 better, 4 worse of 16).

A chain stops when its time budget (or proposal budget) is spent, or when its best has not
improved for half of that budget (as FlexFlow's optimizer does). With `patience="progress"` it
stops instead once its best has not improved during the last half of the proposals it has
made (and it has made at least PROGRESS_FLOOR_PER_OP proposals per op): the reading of the
paper's rule under which its Table 4 reports searches of 0.04 s. It counts proposals, not
seconds, so a chain makes the same proposals whichever simulation evaluates them and how
fast; `benchmarks/table4.py` runs it. The default keeps searching while the budget lasts: a
rule read against the seconds a chain has run let MCMC find LeNet's proven optimum on
`p100:1` for only 2 of 5 seeds (its chains stopped after 0.1 s; benchmarks/README.md). The
search runs one chain per initial strategy with an equal share of the budget and returns the
best over all chains.
Given the same seed and a proposal budget the result is exactly reproducible; with a time
budget the same proposals are made in the same order, and the budget decides how many.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from flexflow.errors import FlexFlowError
from flexflow.graph import OperatorGraph
from flexflow.ops.checks import is_real
from flexflow.search.collector import fewer_collections
from flexflow.search.evaluator import make_evaluator
from flexflow.search.spaces import Space, SpaceSets
from flexflow.simulator import SimContext
from flexflow.strategy import ParallelConfig, Strategy

DEFAULT_BETA = 200.0
DEFAULT_LAYER_MOVES = 0.5
"""The share of proposals that reconfigure a whole unrolled layer (see the module doc)."""
DEFAULT_NEIGHBOUR_MOVES = 0.5
"""The share of one-op proposals that take a neighbour's configuration (see the module doc)."""
DEFAULT_PATH_MOVES = 0.5
"""The share of one-op proposals extended to a path of neighbours on graphs without unrolled
layers (see the module doc); `path_moves_for` gives a graph's default."""
PATH_CONTINUE = (0.75, 0.97)
"""The chances that a path move's walk goes on to one more op after each step, one drawn
uniformly per walk: short walks (about 4 ops where neighbours allow them) align an op with its
neighbourhood, long ones (about 33) a stretch of a deep chain at once (see the module doc)."""
PATIENCES = ("budget", "progress")
"""When a chain whose best stopped improving gives up (see the module doc)."""
PROGRESS_FLOOR_PER_OP = 10
"""Proposals per op a chain makes before the progress rule may stop it: about ten tries of
each op, so a chain does not stop on the first proposals that fail to improve."""


def path_chances(path_continue: float | Sequence[float]) -> tuple[float, ...]:
    """`path_continue` as the tuple of chances a walk draws from; a FlexFlowError unless each
    is in [0, 1) (1 would never end a walk but at a dead end)."""
    chances = tuple(path_continue) if isinstance(path_continue, Sequence) else (path_continue,)
    if not chances or not all(is_real(c) and 0.0 <= c < 1.0 for c in chances):
        raise FlexFlowError(
            f"path_continue is the chance a path move's walk goes on after each step, in [0, 1) "
            f"(or several, one drawn per walk); got {path_continue!r}."
        )
    return chances


def layer_groups(graph: OperatorGraph) -> tuple[tuple[int, ...], ...]:
    """The ops of each layer unrolled into several ops (an LSTM's time steps), by layer."""
    by_layer: dict[str, list[int]] = {}
    for node in graph.ops:
        by_layer.setdefault(node.layer, []).append(node.id)
    return tuple(tuple(ops) for ops in by_layer.values() if len(ops) > 1)


def path_moves_for(graph: OperatorGraph) -> float:
    """The default share of path moves: DEFAULT_PATH_MOVES, or 0 where the graph has unrolled
    layers, whose layer moves already reconfigure many ops at once (path moves made RNNLM's
    10 s searches 5% worse on p100:4, see the module doc)."""
    return 0.0 if layer_groups(graph) else DEFAULT_PATH_MOVES


def op_neighbours(graph: OperatorGraph) -> tuple[tuple[int, ...], ...]:
    """Per op, the ops it reads from and the ops reading it, each once, in graph order."""
    found: list[set[int]] = [set() for _ in graph.ops]
    for edge in graph.edges:
        found[edge.dst].add(edge.src)
        found[edge.src].add(edge.dst)
    return tuple(tuple(sorted(ops)) for ops in found)


@dataclass(frozen=True, slots=True)
class ChainResult:
    init: str
    best: Strategy
    best_s: float
    initial_s: float
    proposals: int
    accepted: int
    seconds: float
    history: tuple[tuple[float, float], ...]  # (elapsed s, best cost s) at every improvement
    best_at: int = 0
    """Proposals made when the best was found (0: the initial strategy)."""

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposals if self.proposals else 0.0


@dataclass(frozen=True, slots=True)
class ChainStatus:
    """What a progress display shows while a chain runs."""

    init: str
    proposals: int
    accepted: int
    best_s: float
    elapsed_s: float


def _stalled(
    patience: str,
    since_improvement_s: float,
    budget_s: float,
    proposals: int,
    improved_at: int,
    max_proposals: int | None,
    floor: int,
) -> bool:
    """Whether a chain whose best last improved at proposal `improved_at` stops now."""
    if patience == "progress":  # no improvement in the last half of the proposals made
        return proposals >= floor and proposals > 2 * improved_at
    if since_improvement_s > budget_s / 2:  # none for half of the time budget
        return True
    return max_proposals is not None and proposals - improved_at > max_proposals / 2


CUTOFF_MARGIN = 1e-9
"""Relative margin of `acceptance_cutoff` over the exact threshold: far above the rounding of
the simulator's bounds and of exp/log, so a cut proposal is one the draw rejects."""


def acceptance_cutoff(current_s: float, draw: float, beta: float, reference_s: float) -> float:
    """The cost above which a proposal is rejected with the acceptance draw `draw` (uniform in
    [0, 1)): `draw < exp(beta * (current - cost) / reference)` fails for every cost above
    `current - ln(draw) * reference / beta`. Drawn before the proposal is simulated, it lets
    the delta simulation stop as soon as its bounds pass that cost (`Evaluator.propose`),
    with the very decision the exact cost would get; inf for a draw of 0."""
    if draw <= 0.0:
        return math.inf
    return (current_s - math.log(draw) * reference_s / beta) * (1 + CUTOFF_MARGIN)


@fewer_collections()
def run_chain(
    context: SimContext,
    init_name: str,
    init: Strategy,
    space: Space,
    rng: np.random.Generator,
    reference_s: float,
    beta: float = DEFAULT_BETA,
    budget_s: float = math.inf,
    max_proposals: int | None = None,
    on_status: Callable[[ChainStatus], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    layer_moves: float = DEFAULT_LAYER_MOVES,
    patience: str = "budget",
    simulation: str = "delta",
    neighbour_moves: float = DEFAULT_NEIGHBOUR_MOVES,
    path_moves: float | None = None,
    path_continue: float | Sequence[float] = PATH_CONTINUE,
) -> ChainResult:
    """One Metropolis-Hastings chain from `init`; `simulation` ("delta" or "full") says how
    proposals are evaluated, `patience` ("budget" or "progress") when a stalled chain stops;
    `path_moves` None takes the graph's default (`path_moves_for`); a path move's walk goes on
    with probability `path_continue` after each step (one of them, drawn per walk, if several)."""
    if path_moves is None:
        path_moves = path_moves_for(context.graph)
    if patience not in PATIENCES:
        raise FlexFlowError(f"unknown patience '{patience}'; choose one of {', '.join(PATIENCES)}.")
    continues = path_chances(path_continue)
    shares = (("layer_moves", layer_moves), ("neighbour_moves", neighbour_moves),
              ("path_moves", path_moves))  # fmt: skip
    for name, share in shares:
        if not 0.0 <= share <= 1.0:
            raise FlexFlowError(f"{name} is the share of proposals, in [0, 1]; got {share}.")
    evaluator = make_evaluator(context, init, simulation)
    num_ops = len(init)
    adjacent = op_neighbours(context.graph)
    valid_set = SpaceSets(space)

    integers, uniform = rng.integers, rng.random

    def neighbour_config(op: int) -> ParallelConfig | None:
        """A neighbour's current configuration that `op` can take, drawn uniformly; None
        when no neighbour's is in its space."""
        valid, configs = valid_set[op], evaluator.strategy.configs
        candidates = [configs[n] for n in adjacent[op] if configs[n] in valid]
        return candidates[int(integers(len(candidates)))] if candidates else None

    def path_from(op: int, config: ParallelConfig) -> tuple[int, ...]:
        """`op` and a random walk on from it over neighbours that can take `config` (each op
        once), going on after each step with a probability of `continues`, drawn per walk."""
        go_on = continues[0] if len(continues) == 1 else continues[int(integers(len(continues)))]
        path, at = [op], op
        while True:
            steps = [n for n in adjacent[at] if n not in path and config in valid_set[n]]
            if not steps:
                break
            at = steps[int(integers(len(steps)))] if len(steps) > 1 else steps[0]
            path.append(at)
            if uniform() >= go_on:
                break
        return tuple(path)

    groups = layer_groups(context.graph)
    group_spaces: dict[tuple[int, ...], tuple] = {}

    def space_of_group(group: tuple[int, ...]) -> tuple:
        """The configurations every op of the group can take, in the first op's order."""
        if group not in group_spaces:
            common = set(space(group[0]))
            for op in group[1:]:
                common &= set(space(op))
            group_spaces[group] = tuple(c for c in space(group[0]) if c in common)
        return group_spaces[group]

    current = initial = evaluator.cost_s
    best, best_strategy = current, evaluator.strategy
    proposals = accepted = 0
    begin = clock()
    last_improvement = 0.0  # elapsed seconds at the last improvement
    improved_at = 0  # proposals made at the last improvement
    floor = PROGRESS_FLOOR_PER_OP * num_ops
    history = [(0.0, best)]
    while True:
        elapsed = clock() - begin
        if elapsed >= budget_s or (max_proposals is not None and proposals >= max_proposals):
            break
        if _stalled(
            patience,
            elapsed - last_improvement,
            budget_s,
            proposals,
            improved_at,
            max_proposals,
            floor,
        ):
            break
        if groups and uniform() < layer_moves:
            group = groups[int(integers(len(groups)))]
            choices = space_of_group(group)
            if not choices:
                continue
            config = choices[int(integers(len(choices)))]
            changed = group
        else:
            op = int(integers(num_ops))
            choices = space(op)
            if len(choices) < 2:
                continue
            config = None
            if neighbour_moves and uniform() < neighbour_moves:
                config = neighbour_config(op)
            if config is None:
                config = choices[int(integers(len(choices)))]
            changed = (op,)
            if path_moves and uniform() < path_moves:
                changed = path_from(op, config)
        configs = evaluator.strategy.configs
        if all(configs[o] == config for o in changed):
            continue
        proposals += 1
        draw = uniform()  # the acceptance draw, first: it gives the cutoff
        cutoff = acceptance_cutoff(current, draw, beta, reference_s)
        if len(changed) == 1:
            cost = evaluator.propose(changed[0], config, cutoff)
        else:
            cost = evaluator.propose_many(changed, config, cutoff)
        if cost <= current or draw < math.exp(beta * (current - cost) / reference_s):
            accepted += 1
            current = cost
            if cost < best:
                best, best_strategy = cost, evaluator.strategy
                last_improvement = clock() - begin
                improved_at = proposals
                history.append((last_improvement, best))
        else:
            evaluator.revert()
        if on_status is not None and proposals % 50 == 0:
            on_status(ChainStatus(init_name, proposals, accepted, best, clock() - begin))
    return ChainResult(
        init_name,
        best_strategy,
        best,
        initial,
        proposals,
        accepted,
        clock() - begin,
        tuple(history),
        improved_at,
    )
