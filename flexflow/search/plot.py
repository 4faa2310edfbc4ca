"""A search as a picture (the paper's Figure 12, for one search): each chain's best simulated
iteration time over the seconds it ran (a dot where it stopped), then the final descent's,
against data parallelism's.

Where a chain from a random strategy starts many times slower than data parallelism, the
iteration-time axis is logarithmic, so that the last, small improvements stay visible.
"""

from __future__ import annotations

import os
from pathlib import Path

from flexflow.errors import FlexFlowError
from flexflow.figures import save_figure
from flexflow.search.search import SearchResult

LOG_SPREAD = 4.0
"""The ratio of the slowest to the fastest time drawn above which the iteration-time axis is
logarithmic."""


def render_search(result: SearchResult, path: str | os.PathLike[str], title: str = "") -> Path:
    """Draw `result`'s chains and final descent to `path` (.png, .svg or .pdf), atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    if not result.chains:
        raise FlexFlowError(
            "render_search draws MCMC chains and this search ran none (the OptCNN baseline's "
            "dynamic programming); draw a search of the soap or operation space."
        )
    fig, ax = plt.subplots(figsize=(9, 4.8))
    drawn: list[float] = [result.dp_s]

    def steps(begin: float, points: list[tuple[float, float]], **style):
        """A best-so-far curve: (seconds from `begin`, cost) points, each held until the next."""
        drawn.extend(cost for _, cost in points)
        (line,) = ax.step(
            [begin + t for t, _ in points],
            [cost * 1e3 for _, cost in points],
            where="post",
            linewidth=1.6,
            zorder=3,
            **style,
        )
        return line

    for index, chain in enumerate(result.chains):
        start = result.chains_started_s[index] if result.chains_started_s else 0.0
        line = steps(
            start,
            [*chain.history, (chain.seconds, chain.best_s)],
            label=f"chain from {chain.init}: {result.dp_s / chain.best_s:.2f}x DP, "
            f"{chain.proposals:,} proposal{'' if chain.proposals == 1 else 's'}",
        )
        ax.plot(start + chain.seconds, chain.best_s * 1e3, "o", color=line.get_color(), zorder=4)
    if result.descent_history:
        proof = "locally optimal" if result.locally_optimal else "stopped by its budget"
        steps(
            result.chains_ended_s,
            [*result.descent_history, (result.polish_s, result.best_s)],
            color="black",
            label=f"final descent ({proof})",
        )
    ax.axhline(
        result.dp_s * 1e3,
        color="gray",
        linestyle="--",
        zorder=2,
        label=f"data parallelism: {result.dp_s * 1e3:.3f} ms",
    )
    if max(drawn) > LOG_SPREAD * min(drawn):
        ax.set_yscale("log")
        for axis in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
            axis(ScalarFormatter())  # 150, 200, 300 ms rather than powers of ten
    ax.set_xlim(0, max(result.seconds, 1e-6))
    ax.set_xlabel("search time (s)")
    ax.set_ylabel("best simulated iteration (ms)")
    ax.set_title(
        title
        or f"best {result.best_s * 1e3:.3f} ms, {result.speedup_over_dp:.2f}x over data "
        f"parallelism, in {result.seconds:.1f} s"
    )
    ax.legend(fontsize=7, loc="best")  # where it hides the fewest points (a chain starts high)
    ax.grid(alpha=0.3)
    return save_figure(fig, path)
