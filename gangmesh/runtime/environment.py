"""Where this process stands in the job, as torchrun or SLURM describe it; no torch needed."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class LaunchEnvironment:
    """Where this process stands in the job, as its launcher described it."""

    launcher: str
    """Which launcher started the process: "torchrun" or "slurm"."""
    rank: int
    """Global rank of this process."""
    world_size: int
    """Number of processes in the job."""
    local_rank: int
    """Rank of this process on its node."""
    local_world_size: int
    """Number of processes on this node."""
    master_addr: str
    """Address of the host where the processes meet."""
    master_port: int
    """Port where the processes meet."""
    restart_count: int = 0
    """How many times this node's torchrun agent restarted its workers (each node's agent
    counts for itself: a node whose workers were healthy keeps its count)."""
    agent_store: bool = False
    """Whether torchrun's agent hosts the store at MASTER_ADDR:MASTER_PORT (else rank 0 does)."""

    @property
    def init_method(self) -> str:
        """The TCP rendezvous address of rank 0."""
        return f"tcp://{self.master_addr}:{self.master_port}"


DEVICE_VARIABLE = "GANGMESH_DEVICE"
"""The device type a process takes where its program names none: "cpu" or "cuda"."""


def wanted_device_type(env: Mapping[str, str] | None = None) -> str | None:
    """The device type GANGMESH_DEVICE asks for ("cpu" or "cuda"); None where it is unset.

    :raises ValueError: another value.
    """
    value = (os.environ if env is None else env).get(DEVICE_VARIABLE, "").strip()
    if value not in ("", "cpu", "cuda"):
        raise ValueError(f"{DEVICE_VARIABLE}: expected cpu or cuda, got {value!r}")
    return value or None


def read_launch_environment(env: Mapping[str, str] | None = None) -> LaunchEnvironment | None:
    """Read torchrun's or SLURM's variables; None when neither describes a job.

    torchrun's variables (WORLD_SIZE, RANK, ...) win over SLURM's. Raises
    ValueError naming the variable when they are inconsistent: RANK without
    WORLD_SIZE, a rank outside the world, a value that is not an integer.

    :param env: the variables to read; default: this process's environment.
    """
    env = os.environ if env is None else env
    if "RANK" in env or "WORLD_SIZE" in env:
        return _read_torchrun(env)
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        return _read_slurm(env)
    return None


def _read_torchrun(env: Mapping[str, str]) -> LaunchEnvironment:
    for name in ("RANK", "WORLD_SIZE"):
        if name not in env:
            other = "WORLD_SIZE" if name == "RANK" else "RANK"
            raise ValueError(f"{name}: not set, but {other} is; set both or neither")
    world_size = _int_var(env, "WORLD_SIZE", minimum=1)
    rank = _rank_var(env, "RANK", world_size)
    local_world_size = _int_var(env, "LOCAL_WORLD_SIZE", minimum=1, default=world_size)
    local_rank = _rank_var(env, "LOCAL_RANK", local_world_size, default=rank % local_world_size)
    master_addr = env.get("MASTER_ADDR", "")
    if world_size > 1 and not master_addr:
        raise ValueError("MASTER_ADDR: not set; expected the address of rank 0 for WORLD_SIZE > 1")
    if env.get("MASTER_PORT", "").strip() == "0":
        raise ValueError(
            "MASTER_PORT: expected a port >= 1, got 0: torchrun --master-port 0 hands its "
            "workers port 0, not the port its store took, so no process can reach the store "
            "(torch's own init_process_group fails there too); give torchrun a free port, or "
            "use --standalone on one node or --rdzv-backend c10d --rdzv-endpoint HOST:PORT"
        )
    master_port = _int_var(env, "MASTER_PORT", minimum=1, default=29500)
    return LaunchEnvironment(
        "torchrun",
        rank,
        world_size,
        local_rank,
        local_world_size,
        master_addr,
        master_port,
        restart_count=_int_var(env, "TORCHELASTIC_RESTART_COUNT", minimum=0, default=0),
        agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true",
    )


def _read_slurm(env: Mapping[str, str]) -> LaunchEnvironment:
    world_size = _int_var(env, "SLURM_NTASKS", minimum=1)
    rank = _rank_var(env, "SLURM_PROCID", world_size)
    local_world_size = _slurm_local_world_size(env, world_size)
    local_rank = _rank_var(env, "SLURM_LOCALID", local_world_size, default=rank % local_world_size)
    nodes = (
        env.get("SLURM_STEP_NODELIST")
        or env.get("SLURM_JOB_NODELIST")
        or env.get("SLURM_NODELIST", "")
    )
    master_addr = env.get("MASTER_ADDR") or (first_host(nodes) if nodes else "127.0.0.1")
    job_id = _int_var(env, "SLURM_JOB_ID", minimum=0, default=0)
    master_port = _int_var(env, "MASTER_PORT", minimum=1, default=20000 + job_id % 10000)
    return LaunchEnvironment(
        "slurm", rank, world_size, local_rank, local_world_size, master_addr, master_port
    )


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: ``"gpu[007-009,012],cpu1"`` -> ``"gpu007"``.

    :param nodelist: the value of SLURM_JOB_NODELIST.
    :raises ValueError: ``nodelist`` is not a SLURM node list.
    """
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if match is None:
        raise ValueError(f"SLURM_JOB_NODELIST: expected a SLURM node list, got {nodelist!r}")
    prefix, ranges = match.groups()
    if ranges is None:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


_TASKS_PER_NODE = ("SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
"""Where SLURM says how many tasks each node runs, the step's own layout first: srun sets
the first and the last for every step, the middle one only under ``--ntasks-per-node``."""


def _slurm_local_world_size(env: Mapping[str, str], world_size: int) -> int:
    """The tasks on this process's node (SLURM_NODEID), as SLURM lays them out; the whole job
    where SLURM says nothing of its nodes."""
    node = _int_var(env, "SLURM_NODEID", minimum=0, default=0)
    for name in _TASKS_PER_NODE:
        if env.get(name, "").strip():
            return tasks_on_node(name, env[name], node)
    return world_size


def tasks_on_node(name: str, value: str, node: int) -> int:
    """The task count of node ``node`` in SLURM's per-node counts ``value`` of variable
    ``name``: ``"4(x2),3"`` says 4, 4, 3; a single count (``"4"``) holds for every node.

    :raises ValueError: ``value`` is not such a list, or has no count for node ``node``.
    """
    counts: list[int] = []
    for entry in value.strip().split(","):
        found = re.fullmatch(r"\s*([1-9]\d*)\s*(?:\(x([1-9]\d*)\))?\s*", entry)
        if found is None:
            raise ValueError(
                f"{name}: expected task counts such as 4, 4(x2) or 2(x3),1, got {value!r}"
            )
        counts += [int(found[1])] * int(found[2] or 1)
    if len(counts) == 1:
        return counts[0]
    if node >= len(counts):
        raise ValueError(f"SLURM_NODEID: expected a node in [0, {len(counts)}) ({name}={value!r})")
    return counts[node]


def _int_var(env: Mapping[str, str], name: str, *, minimum: int, default: int | None = None) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        if default is None:
            raise ValueError(f"{name}: not set; expected an integer >= {minimum}")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value}")
    return value


def _rank_var(env: Mapping[str, str], name: str, size: int, default: int | None = None) -> int:
    value = _int_var(env, name, minimum=0, default=default)
    if value >= size:
        raise ValueError(f"{name}: expected a rank in [0, {size}), got {value}")
    return value
