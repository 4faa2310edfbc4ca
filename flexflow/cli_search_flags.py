"""The flags of `flexflow search`'s MCMC chains and final descent (paper §6); `flexflow.cli_search` registers and runs the command."""

from __future__ import annotations

import argparse

from flexflow.cli_args import positive_float, positive_int, seed_int, share
from flexflow.search.evaluator import SIMULATIONS
from flexflow.search.mcmc import DEFAULT_BETA, DEFAULT_NEIGHBOUR_MOVES, DEFAULT_PATH_MOVES
from flexflow.search.search import DEFAULT_INITS as SEARCH_INITS
from flexflow.search.spaces import SPACES

DEFAULT_INITS = ",".join(SEARCH_INITS)
DEFAULT_BUDGET_S = 30.0


def add_chain_flags(search: argparse.ArgumentParser) -> None:
    """How long the MCMC chains run, from which strategies, in which space."""
    search.add_argument(
        "--budget",
        type=positive_float,
        default=None,
        help=f"the MCMC chains' time in seconds (default {DEFAULT_BUDGET_S:g}); the final descent "
        "follows, as long as --polish-budget allows",
    )
    search.add_argument(
        "--proposals",
        type=positive_int,
        default=None,
        help="stop after this many proposals in all (exactly reproducible with --seed)",
    )
    search.add_argument(
        "--seed", type=seed_int, default=0, help="seed of the proposals and random chains"
    )
    search.add_argument(
        "--init",
        action="append",
        metavar="LIST",
        help="initial strategies, one chain each, comma-separated (the flag may repeat): dp, "
        "expert, model, random, dp-width (data parallelism on the fastest number of devices; no "
        f"chain when that is all of them), optcnn or files (default {DEFAULT_INITS})",
    )
    search.add_argument(
        "--space",
        choices=(*SPACES, "optcnn"),
        default="soap",
        help="soap (FlexFlow), operation (placement only, REINFORCE's space) or optcnn "
        "(OptCNN's dynamic programming over sample/attribute/parameter splits instead of MCMC)",
    )


def add_move_flags(search: argparse.ArgumentParser) -> None:
    """Which proposals the chains draw, and how readily they accept a slower strategy."""
    search.add_argument(
        "--beta",
        type=positive_float,
        default=None,
        help=f"MCMC inverse temperature (default {DEFAULT_BETA:g})",
    )
    search.add_argument(
        "--neighbour-moves",
        type=share,
        default=None,
        metavar="SHARE",
        help="share of one-op proposals that give the op a neighbour's configuration "
        f"(default {DEFAULT_NEIGHBOUR_MOVES:g}; 0: only the paper's uniform draws)",
    )
    search.add_argument(
        "--path-moves",
        type=share,
        default=None,
        metavar="SHARE",
        help="share of one-op proposals that give the same configuration to a random path of "
        f"neighbours from the op (default {DEFAULT_PATH_MOVES:g} on graphs without unrolled "
        "layers, 0 on others; 0: none)",
    )


def add_descent_flags(search: argparse.ArgumentParser) -> None:
    """The final descent to a local optimum, after the chains."""
    search.add_argument(
        "--no-polish",
        action="store_true",
        help="skip the final descent to a local optimum",
    )
    search.add_argument(
        "--polish-budget",
        type=positive_float,
        metavar="SECONDS",
        help="time for the final descent (default: as long as it takes to prove a local optimum)",
    )
    search.add_argument(
        "--no-narrow-sweeps",
        action="store_true",
        help="the final descent tries every configuration of each op in every sweep, never "
        "first only its neighbours' (another local optimum, often found more slowly)",
    )


def add_simulation_flag(search: argparse.ArgumentParser) -> None:
    """How the chains and the descent evaluate a proposal."""
    search.add_argument(
        "--simulation",
        choices=SIMULATIONS,
        default=None,
        help="how proposals are evaluated: delta simulation (default) or each task graph "
        "built and simulated whole (the same result, slower; the paper's Table 4)",
    )
