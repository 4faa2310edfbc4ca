"""The `local` machine under a launcher: one node per Legate rank, read from the variables each
launcher sets in every rank (checked here with those variables, and under the real
`legate --launcher mpirun` by tests/runtime/test_multirank.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from flexflow.errors import MachineError
from flexflow.machine_presets import LegateRanks, launcher_ranks, local_machine


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, (1, 1)),
        ({"PMI_SIZE": "4", "MPI_LOCALNRANKS": "2"}, (4, 2)),  # MPICH's Hydra
        ({"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"}, (4, 1)),  # Open MPI
        ({"SLURM_NTASKS": "6", "SLURM_NTASKS_PER_NODE": "2(x3)"}, (6, 2)),  # srun
        ({"MV2_COMM_WORLD_SIZE": "2"}, (2, 1)),  # per-host count unknown: a host per rank
        (
            {
                "WORKER_PEERS_INFO": "10.0.0.1:5 10.0.0.1:6 10.0.0.2:5",
                "WORKER_SELF_INFO": "10.0.0.2:5",
            },
            (3, 1),
        ),
    ],
)
def test_launcher_ranks_from_each_launchers_variables(env, expected):
    ranks = launcher_ranks(env)
    assert (ranks.ranks, ranks.ranks_per_host) == expected


def test_launcher_variable_that_is_not_a_count_is_refused():
    with pytest.raises(MachineError, match=r"PMI_SIZE='two' is not a rank count >= 1"):
        launcher_ranks({"PMI_SIZE": "two"})


def test_two_ranks_on_one_host_meet_in_shared_memory():
    machine = local_machine("--cpus 2 --gpus 0", memory_bytes=8 * 2**30, ranks=LegateRanks(2, 2))
    assert machine.num_nodes == 2 and machine.num_devices == 4
    assert [d.name for d in machine.devices_on_node(1)] == ["n1.cpu0", "n1.cpu1"]
    assert machine.devices[0].memory_bytes == 2 * 2**30  # the host's memory shared by 4 cores
    assert [link.kind for link in machine.route(0, 1)] == ["memory"]
    between = machine.route(0, 2)  # n0.cpu0 -> n1.cpu0: no network on one host
    assert [link.dst for link in between] == ["n0.host", "h0.shm", "n1.host", "n1.cpu0"]
    assert {link.kind for link in machine.links} == {"memory"}


def test_ranks_on_two_hosts_cross_the_network_only_between_hosts():
    machine = local_machine("--cpus 1 --gpus 0", memory_bytes=2**30, ranks=LegateRanks(4, 2))
    assert machine.num_nodes == 4
    same_host = machine.route(0, 1)
    other_host = machine.route(0, 2)
    assert "infiniband" not in {link.kind for link in same_host}
    assert [link.kind for link in other_host].count("infiniband") == 2
    assert machine.transfer_s(0, 2, 1e6) > machine.transfer_s(0, 1, 1e6)


def test_local_machine_reads_the_launcher_in_a_rank_process():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEGATE_", "PMI_", "OMPI_"))}
    env.update(LEGATE_CONFIG="--cpus 1 --gpus 0", PMI_SIZE="2", MPI_LOCALNRANKS="2")
    code = (
        "import json; from flexflow.machine import parse_machine; m = parse_machine('local'); "
        "print(json.dumps([m.num_nodes, [d.name for d in m.devices]]))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == [2, ["n0.cpu0", "n1.cpu0"]]
