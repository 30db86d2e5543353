"""What a job asks of a join, checked before any process waits."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from gangmesh.assembly.join_store import parse_address
from gangmesh.assembly.roots import check_root
from gangmesh.plan._checks import InvalidTypeError, check_timeout
from gangmesh.plan.layout import Layout
from gangmesh.plan.parts import check_part_name
from gangmesh.plan.shards import TensorShards
from gangmesh.plan.topology import MeshTopology
from gangmesh.runtime.gang import Gang
from gangmesh.runtime.process_group_gang import ProcessGroupGang

DEFAULT_JOIN_TIMEOUT = timedelta(seconds=60)
"""The timeout of a join's collectives where none is given (at most the root gang's, less
:data:`SLACK`)."""
SLACK = timedelta(seconds=5)
"""How much longer than the join's timeout the root gang's must be: a push's ranks learn
whether every route went through over the root gang, after the slowest has named who broke
its route (within the join's timeout and 3 s)."""


@dataclass(frozen=True)
class JoinRequest:
    """A job's request to join another, checked (see :func:`~gangmesh.join_jobs`)."""

    root: ProcessGroupGang
    """The job's root gang."""
    job: str
    """This job's name."""
    other: str
    """The other job's name."""
    address: str
    """The join server's address."""
    plan: MeshTopology
    """This job's plan."""
    shards: dict[str, TensorShards]
    """How this job holds each tensor it pushes or receives."""
    timeout: timedelta
    """The timeout of every collective across the join."""
    wait: timedelta
    """How long to wait for the other job."""

    @property
    def name(self) -> str:
        """The join's name in the store: both jobs', sorted."""
        return "+".join(sorted((self.job, self.other)))


def check_request(
    root: Gang,
    job: object,
    other: object,
    address: object,
    plan: object,
    shards: object,
    timeout: object,
    wait: object,
) -> JoinRequest:
    """The request, checked.

    :raises TypeError, ValueError: an argument that is not as :func:`~gangmesh.join_jobs`
        says, naming it and what was expected.
    """
    check_root(root, parts=False)
    if not isinstance(root, ProcessGroupGang):
        raise ValueError(
            f"root_gang: expected the root gang of a launched job, got {root.describe()}"
        )
    name, other_name = check_part_name(job, "job"), check_part_name(other, "other")
    if name == other_name:
        raise ValueError(f"other: expected another job's name than this job's, got {other!r}")
    parse_address(address)
    topology = _plan(plan, root.size)
    given = _shards(shards, topology)
    limit = root.timeout - SLACK
    if limit <= timedelta(0):
        raise ValueError(
            f"root_gang: expected a timeout over {SLACK.total_seconds():g} s (a join's "
            f"collectives take that much less), got {root.timeout.total_seconds():g} s"
        )
    checked = check_timeout(timeout) or min(DEFAULT_JOIN_TIMEOUT, limit)
    if checked > limit:
        raise ValueError(
            f"timeout: expected at most the root gang's timeout less {SLACK.total_seconds():g} s "
            f"({limit.total_seconds():g} s), got {checked.total_seconds():g} s"
        )
    return JoinRequest(
        root, name, other_name, str(address), topology, given, checked,
        check_timeout(wait, "wait") or checked,
    )  # fmt: skip


def _plan(plan: object, world_size: int) -> MeshTopology:
    """The job's plan: a MeshTopology, a Layout, or create_gangs' keywords."""
    if isinstance(plan, MeshTopology):
        found = plan
    elif isinstance(plan, Layout):
        found = MeshTopology.from_layout(world_size, plan)
    elif isinstance(plan, Mapping):
        found = MeshTopology.from_layout(world_size, Layout(**plan))
    else:
        raise InvalidTypeError(
            f"plan: expected the job's MeshTopology (gangs.plan), a Layout or create_gangs' "
            f"keywords, got {plan!r}"
        )
    if found.world_size != world_size:
        raise ValueError(
            f"plan: expected a plan of this job's {world_size} processes, got one of "
            f"{found.world_size}"
        )
    return found


def _shards(shards: object, plan: MeshTopology) -> dict[str, TensorShards]:
    """The tensors the job pushes or receives, each checked against its plan."""
    if shards is None:
        return {}
    if not isinstance(shards, Mapping):
        raise InvalidTypeError(
            f"shards: expected a mapping of names to TensorShards, got {shards!r}"
        )
    found: dict[str, Any] = {}
    for name, given in shards.items():
        if not isinstance(name, str) or not isinstance(given, TensorShards):
            raise InvalidTypeError(
                f"shards[{name!r}]: expected a TensorShards under a str name, got {given!r}"
            )
        given.check_dims(plan, f"shards[{name!r}]")
        found[name] = given
    return found
