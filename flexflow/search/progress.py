"""The MCMC search with a live table of its chains and then of its final descent, for the CLI
and compile-time searches. The descent proves local optimality and can outlast the chains' budget
by far on large machines, so it shows how close the proof is: the ops examined in a row without
an improvement, out of all ops."""

from __future__ import annotations

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from flexflow.search.local import DescentStatus
from flexflow.search.mcmc import ChainStatus
from flexflow.search.search import SearchResult, search
from flexflow.simulator import SimContext


def _progress_table(rows: dict[str, ChainStatus], dp_s: float, budget_s: float) -> Table:
    table = Table(title=f"MCMC search (budget {budget_s:g} s)")
    for column in (
        "chain from",
        "proposals",
        "accepted",
        "proposals/s",
        "best ms",
        "speedup over DP",
    ):
        table.add_column(column, justify="left" if column == "chain from" else "right")
    for status in rows.values():
        rate = status.proposals / status.elapsed_s if status.elapsed_s else 0.0
        table.add_row(
            status.init,
            f"{status.proposals:,}",
            f"{status.accepted / max(status.proposals, 1):.0%}",
            f"{rate:,.0f}",
            f"{status.best_s * 1e3:.3f}",
            f"{dp_s / status.best_s:.2f}x",
        )
    return table


def _descent_line(status: DescentStatus, dp_s: float) -> Text:
    rate = status.neighbours / status.elapsed_s if status.elapsed_s else 0.0
    sweep = (
        f"wide sweep: {status.unchanged:,} of {status.num_ops:,} ops unchanged in a row "
        f"(locally optimal at {status.num_ops:,})"
        if status.wide
        else f"narrow sweep (neighbours' configurations): {status.unchanged:,} of "
        f"{status.num_ops:,} ops unchanged in a row"
    )
    return Text(
        f"final descent, {sweep}, {status.neighbours:,} neighbours simulated "
        f"({rate:,.0f}/s), {status.improvements:,} improvement(s), best "
        f"{status.cost_s * 1e3:.3f} ms ({dp_s / status.cost_s:.2f}x DP), "
        f"{status.elapsed_s:,.0f} s"
    )


def search_with_progress(
    console: Console, show: bool, context: SimContext, dp_s: float, budget_s: float, **options
) -> SearchResult:
    """`flexflow.search.search` with a live table of its chains (when `show`)."""
    if not show:
        return search(context, budget_s, **options)
    rows: dict[str, ChainStatus] = {}
    with Live(_progress_table(rows, dp_s, budget_s), console=console, transient=True) as live:

        def update(status: ChainStatus) -> None:
            rows[status.init] = status
            live.update(_progress_table(rows, dp_s, budget_s))

        def update_descent(status: DescentStatus) -> None:
            live.update(Group(_progress_table(rows, dp_s, budget_s), _descent_line(status, dp_s)))

        return search(context, budget_s, on_status=update, on_descent=update_descent, **options)
