"""Older fairseq2 releases' questions about the launch: this process's rank and the job's size."""

from __future__ import annotations

from gangmesh.runtime.environment import read_launch_environment


def get_rank() -> int:
    """This process's rank in the job; 0 without a launcher.

    :raises ValueError: the launcher's variables are inconsistent.
    """
    return _launched("rank", 0)


def get_world_size() -> int:
    """The number of processes in the job; 1 without a launcher.

    :raises ValueError: the launcher's variables are inconsistent.
    """
    return _launched("world_size", 1)


def get_local_rank() -> int:
    """This process's rank on its node; 0 without a launcher.

    :raises ValueError: the launcher's variables are inconsistent.
    """
    return _launched("local_rank", 0)


def get_local_world_size() -> int:
    """The number of processes on this node; 1 without a launcher.

    :raises ValueError: the launcher's variables are inconsistent.
    """
    return _launched("local_world_size", 1)


def _launched(field: str, alone: int) -> int:
    """``field`` of the launcher's description of this process (torchrun's, else SLURM's),
    or ``alone`` where no launcher started it."""
    env = read_launch_environment()
    return alone if env is None else int(getattr(env, field))
