"""The bridges of one epoch of a join that a process is a member of: the routes of a push, and
the bridges asked for by ranks; each made on a namespace of the epoch in the join's store,
never split from either job's world.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta

import torch
import torch.distributed as dist

from gangmesh.assembly.join_sides import Epoch
from gangmesh.assembly.join_store import JoinStore
from gangmesh.assembly.weight_push import buffer
from gangmesh.plan.push_plan import PushPlan, Route
from gangmesh.runtime import _c10d
from gangmesh.runtime.bridge_gang import Blame, BridgeGang

Members = tuple[tuple[str, int], ...]
"""(job, rank) of each member of a bridge, by its rank in the bridge."""


class EpochGangs:
    """This process's bridges in ``epoch``.

    :param store: the join's store.
    :param epoch: the epoch the bridges belong to.
    :param me: this process's job and rank.
    :param device: where the bridges' tensors live.
    :param timeout: the timeout of their collectives and meetings.
    :param blame_for: the blame of a bridge of those members.
    """

    def __init__(
        self,
        store: JoinStore,
        epoch: Epoch,
        me: tuple[str, int],
        device: torch.device,
        timeout: timedelta,
        blame_for: Callable[[Members], Blame],
    ) -> None:
        self.epoch = epoch
        self._store, self._me, self._device, self._timeout = store, me, device, timeout
        self._blame_for = blame_for
        self._routes: dict[str, list[tuple[Route, BridgeGang, torch.Tensor]]] = {}
        self._gangs: list[BridgeGang] = []
        self._spaces: dict[str, int] = {}
        """The namespace of every bridge of the epoch, this process's or not, and its size."""
        self._bridges = 0

    def routes(
        self, plan: PushPlan, sender: str, receiver: str
    ) -> list[tuple[Route, BridgeGang, torch.Tensor]]:
        """The routes of a push from ``sender`` to ``receiver`` that this process is in, with
        their bridges and buffers (made on the first call, the bridges in the order of the
        routes: every member makes them in one order; the buffers kept for the epoch's pushes:
        memory touched once, not at every push).

        :raises GangError: a member did not come to a bridge's meeting.
        """
        found = self._routes.get(sender)
        if found is None:
            found = self._routes[sender] = []
            for index, route in enumerate(plan.routes):
                members = ((sender, route.sender), *((receiver, r) for r in route.receivers))
                gang = self._gang(f"push-{sender}/{index}", members, f"push {sender} {index}")
                if gang is not None:
                    found.append((route, gang, buffer(route, self._device)))
        return found

    def bridge(self, members: Members) -> BridgeGang | None:
        """A bridge of ``members`` (the next of the epoch); None where this process is not one.

        :raises GangError: a member did not come to its meeting.
        """
        self._bridges += 1
        return self._gang(f"bridge{self._bridges}", members, f"bridge {self._bridges}")

    def _gang(self, space: str, members: Members, name: str) -> BridgeGang | None:
        prefix = f"{self.epoch.key}/{space}"
        self._spaces[prefix] = len(members)
        if self._me not in members:
            return None
        store = dist.PrefixStore(prefix, self._store.rendezvous)  # type: ignore[attr-defined]
        gang = BridgeGang(
            store, members.index(self._me), len(members), self._device, self._timeout,
            name=name, members=members, blame=self._blame_for(members),
        )  # fmt: skip
        self._gangs.append(gang)
        return gang

    def keys(self) -> list[str]:
        """The keys the meetings of the epoch's bridges leave in the store."""
        return [
            f"{prefix}/{key}"
            for prefix, size in self._spaces.items()
            for rank in range(size)
            for key in _c10d.rendezvous_keys(self._device, rank)
        ]

    def close(self) -> None:
        """Close this process's bridges of the epoch."""
        for gang in self._gangs:
            gang.close()
        self._gangs.clear()
        self._routes.clear()


def members_of(ranks_by_job: dict[str, Sequence[int]]) -> Members:
    """The members of a bridge: each job's ranks ascending, the jobs by name."""
    return tuple((job, rank) for job in sorted(ranks_by_job) for rank in sorted(ranks_by_job[job]))
