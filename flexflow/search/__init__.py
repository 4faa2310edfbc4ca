"""The execution optimizer (paper §6): MCMC search, exhaustive search and local-optimality checks."""

from flexflow.search.exhaustive import ExhaustiveResult, exhaustive_search
from flexflow.search.mcmc import DEFAULT_BETA, ChainResult, ChainStatus, run_chain
from flexflow.search.search import SearchResult, search

__all__ = [
    "DEFAULT_BETA",
    "ChainResult",
    "ChainStatus",
    "ExhaustiveResult",
    "SearchResult",
    "exhaustive_search",
    "run_chain",
    "search",
]
