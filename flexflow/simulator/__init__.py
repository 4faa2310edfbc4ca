"""The execution simulator (paper §5): task graphs, full and delta simulation, results and traces."""

from flexflow.simulator.context import SimContext
from flexflow.simulator.result import SimulationResult, summarize
from flexflow.simulator.schedule import DeltaSimulator, Schedule, full_simulate
from flexflow.simulator.taskgraph import TaskGraph

__all__ = [
    "DeltaSimulator",
    "Schedule",
    "SimContext",
    "SimulationResult",
    "TaskGraph",
    "full_simulate",
    "summarize",
]
