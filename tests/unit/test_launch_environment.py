"""The launcher's environment (torchrun, SLURM) is read, checked and named in errors."""

import pytest

from gangmesh.runtime.environment import first_host, read_launch_environment

TORCHRUN = {
    "RANK": "5",
    "WORLD_SIZE": "8",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "4",
    "MASTER_ADDR": "10.1.2.3",
    "MASTER_PORT": "29400",
}


def test_torchrun_variables():
    env = read_launch_environment(TORCHRUN)
    assert env is not None
    assert (env.launcher, env.rank, env.world_size) == ("torchrun", 5, 8)
    assert (env.local_rank, env.local_world_size) == (1, 4)
    assert env.init_method == "tcp://10.1.2.3:29400"


def test_slurm_variables():
    env = read_launch_environment(
        {
            "SLURM_PROCID": "6",
            "SLURM_NTASKS": "8",
            "SLURM_LOCALID": "2",
            "SLURM_NTASKS_PER_NODE": "4(x2)",
            "SLURM_JOB_NODELIST": "gpu[017-018]",
            "SLURM_JOB_ID": "12345",
        }
    )
    assert env is not None
    assert (env.launcher, env.rank, env.world_size) == ("slurm", 6, 8)
    assert (env.local_rank, env.local_world_size) == (2, 4)
    assert env.master_addr == "gpu017"
    assert env.master_port == 20000 + 12345 % 10000


def test_torchrun_wins_over_slurm():
    env = read_launch_environment({**TORCHRUN, "SLURM_PROCID": "0", "SLURM_NTASKS": "2"})
    assert env is not None and env.launcher == "torchrun"


def test_no_launcher_means_no_environment():
    assert read_launch_environment({"HOME": "/root"}) is None


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"RANK": "0"}, "WORLD_SIZE: not set"),
        ({"WORLD_SIZE": "2", "MASTER_ADDR": "h"}, "RANK: not set"),
        (
            {"RANK": "8", "WORLD_SIZE": "8", "MASTER_ADDR": "h"},
            r"RANK: expected a rank in \[0, 8\)",
        ),
        ({"RANK": "x", "WORLD_SIZE": "8", "MASTER_ADDR": "h"}, "RANK: expected an integer"),
        ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE: expected an integer >= 1"),
        ({"RANK": "1", "WORLD_SIZE": "2"}, "MASTER_ADDR: not set"),
        ({**TORCHRUN, "LOCAL_RANK": "4"}, "LOCAL_RANK"),
        ({**TORCHRUN, "MASTER_PORT": "port"}, "MASTER_PORT"),
        ({**TORCHRUN, "MASTER_PORT": "0"}, "MASTER_PORT: expected a port >= 1, got 0: torchrun"),
        ({"SLURM_PROCID": "3", "SLURM_NTASKS": "2"}, "SLURM_PROCID"),
        (
            {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "x"},
            "SLURM_NTASKS_PER_NODE",
        ),
    ],
)
def test_inconsistent_environments_name_the_variable(env, needle):
    with pytest.raises(ValueError, match=needle):
        read_launch_environment(env)


@pytest.mark.parametrize(
    ("nodelist", "host"),
    [
        ("node1", "node1"),
        ("gpu[007-009,012]", "gpu007"),
        ("a[3],b[1-2]", "a3"),
        ("x-y1,x-y2", "x-y1"),
    ],
)
def test_first_host_of_a_slurm_node_list(nodelist, host):
    assert first_host(nodelist) == host
