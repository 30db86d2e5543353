"""Two jobs launched apart, joined: each keeps its own world, store, plan and groups; the join
gives it the other job's plan, bridges to chosen ranks of the other job, and weight pushes
from its layout to the other's.

Both jobs meet at a join server (:mod:`gangmesh.assembly.join_server`). Everything across the
join is made on a namespace of the join's current *epoch*; a push that fails is named on every
rank of both jobs that took part, and ends the epoch (a bridge that fails, at the end of the
job's next push or receive, or at its next meet): each job goes on alone (its own groups
untouched), and the two meet in the next epoch at a later push, receive or meet, once the
other job is back (restarted by its launcher, or still there).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import final

import torch
from typing_extensions import override

from gangmesh.assembly import join_meeting, join_sides
from gangmesh.assembly.join_blame import Transfer, blame, mark, report
from gangmesh.assembly.join_gangs import EpochGangs, Members, members_of
from gangmesh.assembly.join_setup import JoinRequest
from gangmesh.assembly.join_sides import Epoch, Side
from gangmesh.assembly.join_store import JoinStore
from gangmesh.assembly.join_transfer import cross
from gangmesh.assembly.store_calls import peek
from gangmesh.assembly.weight_push import check_tensors
from gangmesh.plan.join_plan import JoinPlan
from gangmesh.plan.push_plan import PushPlan
from gangmesh.plan.topology import MeshTopology
from gangmesh.runtime import faults
from gangmesh.runtime.bridge_gang import Blame, BridgeGang
from gangmesh.runtime.gang import GangError, ReduceOperation
from gangmesh.runtime.process_group_gang import ProcessGroupGang

log = logging.getLogger("gangmesh")

_VERSIONS = 2**62
"""Versions are ints in [0, _VERSIONS)."""
_NONE = -_VERSIONS
"""A rank's version where it received no route: below any other."""


@final
class JoinedJobs:
    """This process's view of a join of its job with another, launched apart. Made by
    :func:`~gangmesh.join_jobs`; a context manager that closes it.

    :param request: what this job asked for (checked).
    :param store: the join's store.
    :param mine: this job's arrival.
    :param other: the other job's arrival met.
    :param epoch: the epoch both are in.
    """

    def __init__(
        self, request: JoinRequest, store: JoinStore, mine: Side, other: Side, epoch: Epoch
    ) -> None:
        self._request, self._store = request, store
        self._root: ProcessGroupGang = request.root
        self.job = request.job
        """This job's name in the join."""
        self.other = request.other
        """The other job's name."""
        self._sides = {mine.job: mine, other.job: other}
        self._me = (self.job, self._root.rank)
        self._gangs = self._epoch_gangs(epoch)
        self._transfers = 0
        self._plans: dict[str, PushPlan] = {}
        self._listener = self._report
        faults.listen_outside(self._listener)
        self._next = (epoch, True)
        """The epoch of the next push, receive or meet, and whether the other job is in it."""
        self._lookout = join_meeting.Lookout(store.calls, other, epoch)
        """Rank 0's look for the epoch after."""
        self._broken = False
        """Whether a bridge of this process failed since this job last agreed on an epoch."""
        self._closed = False

    @property
    def address(self) -> str:
        """The join server's address."""
        return self._store.address

    @property
    def epoch(self) -> int:
        """The number of the epoch this job is in: higher after every arrival of either job."""
        return self._gangs.epoch.number

    @property
    def plan(self) -> JoinPlan:
        """Both jobs' plans, by job name: what pairs ranks across the join."""
        return JoinPlan({name: side.plan for name, side in self._sides.items()})

    @property
    def other_plan(self) -> MeshTopology:
        """The other job's plan (its processes numbered from 0)."""
        return self._sides[self.other].plan

    def push_plan(self, sender: str | None = None) -> PushPlan:
        """The routes of a push from job ``sender`` (default: this one) to the other.

        :param sender: the sending job's name.
        :raises ValueError: ``sender`` is neither job, or the jobs' tensors do not match.
        """
        sender = self.job if sender is None else sender
        if sender not in self._sides:
            raise ValueError(f"sender: expected {self.job} or {self.other}, got {sender!r}")
        plan = self._plans.get(sender)
        if plan is None:
            receiver = self.other if sender == self.job else self.job
            a, b = self._sides[sender], self._sides[receiver]
            plan = self._plans[sender] = PushPlan(a.plan, a.shards, b.plan, b.shards)
        return plan

    def bridge(self, **ranks_by_job: list[int]) -> BridgeGang | None:
        """A gang of the ranks named by job (``bridge(trainer=[0], generator=[0, 1])``); None
        on the processes not named. Every process of both jobs calls it in the same epoch with
        the same ranks, in the same order as its other bridges; its ranks are each job's ranks
        ascending, the jobs by name (``bridge.members.index(("trainer", 0))`` is where rank 0
        of the trainer sits). It belongs to the epoch: a new epoch closes it.

        :param ranks_by_job: job name -> ranks of that job.
        :raises ValueError: an unknown job, no ranks, a rank outside its job or named twice.
        :raises RuntimeError: the join is closed.
        :raises GangError: a member did not come within the timeout.
        """
        self._check_open()
        if not ranks_by_job:
            raise ValueError(
                f"ranks_by_job: expected ranks of {self.job} or {self.other}, got none"
            )
        for name, ranks in ranks_by_job.items():
            if name not in self._sides:
                raise ValueError(
                    f"ranks_by_job: unknown job {name!r}; expected {self.job} or {self.other}"
                )
            size = self._sides[name].plan.world_size
            ranks = list(ranks)
            bad = [r for r in ranks if type(r) is not int or not 0 <= r < size]
            if not ranks or bad or len(set(ranks)) < len(ranks):
                raise ValueError(f"{name}: expected unique ranks in [0, {size}), got {ranks}")
        try:
            return self._gangs.bridge(members_of(dict(ranks_by_job)))
        except GangError:
            self._broken = True
            raise

    def meet(self) -> bool:
        """Enter the latest epoch this job can be in with the other; whether the other job is
        in it. Every rank of this job calls it together (one collective of its root gang).
        push and receive do so themselves: a job whose ranks only use bridges calls it, say,
        once a step, then makes its bridges again where :attr:`epoch` changed. Where a bridge
        failed on any rank of this job since its last push, receive or meet, the epoch is
        over: False, and this job meets the other in a later one.

        :raises RuntimeError: the join is closed.
        :raises GangError: a rank of this job did not come (its root gang's timeout).
        """
        self._check_open()
        self._agree_next(False, None)
        return self._enter_next_epoch()

    def push(self, version: int, tensors: Mapping[str, torch.Tensor]) -> bool:
        """Send this rank's shards of the tensors to the other job's ranks that hold them
        (each receives every element from one sender; no rank gathers), with ``version`` (say,
        the step). Every rank of this job calls it as the other job's call :meth:`receive`.
        False, at once, where the other job is not in the epoch (gone, not back yet, or this
        job's last push failed, or a bridge of it before its last push, receive or meet).

        :param version: what the receivers read back.
        :param tensors: tensor name -> this rank's shard, as its side's TensorShards say.
        :raises TypeError, ValueError: a version that is no int in [0, 2**62), or tensors that
            are not this rank's shards (before any process waits).
        :raises RuntimeError: the join is closed.
        :raises GangError: the push failed, naming who broke it (on every rank of this job).
        """
        if isinstance(version, bool) or not isinstance(version, int):
            raise TypeError(f"version: expected an int (the step, say), got {version!r}")
        if not 0 <= version < _VERSIONS:
            raise ValueError(f"version: expected an int in [0, 2**62), got {version}")
        ready = self._enter_next_epoch()
        plan = self.push_plan()
        checked = check_tensors(tensors, plan, self._root.rank, True, self._root.device)
        return self._transfer(plan, checked, version, ready) is not None

    def receive(self, tensors: Mapping[str, torch.Tensor]) -> int | None:
        """Overwrite this rank's shards of the tensors with those the other job pushes; the
        version it pushed. None, at once, where the other job is not in the epoch.

        :param tensors: tensor name -> this rank's shard, as its side's TensorShards say.
        :raises TypeError, ValueError: tensors that are not this rank's shards.
        :raises RuntimeError: the join is closed.
        :raises GangError: the push failed, naming who broke it (on every rank of this job);
            the tensors are then partly overwritten.
        """
        ready = self._enter_next_epoch()
        plan = self.push_plan(self.other)
        checked = check_tensors(tensors, plan, self._root.rank, False, self._root.device)
        return self._transfer(plan, checked, None, ready)

    def close(self) -> None:
        """Close the bridges, take this job's keys out of the join's store and disconnect;
        later calls do nothing. Communicates with no peer."""
        if self._closed:
            return
        self._closed = True
        faults.forget_outside(self._listener)
        self._gangs.close()
        mine = self._sides[self.job]
        keys = [f"at/{self.job}/{self._root.rank}"]
        if self._root.rank == 0:
            keys += self._epoch_keys() + [
                f"side/{self.job}/{n}" for n in range(mine.incarnation - 1, mine.incarnation + 1)
            ]
            keys += [f"latest/{self.job}", f"reports/{self.job}"]
        try:
            self._store.delete(keys)
        except RuntimeError as ex:
            log.debug("the join's store did not take the keys back: %s", ex)
        self._store.close()

    def __enter__(self) -> JoinedJobs:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @override
    def __repr__(self) -> str:
        where = f"{self.job} rank {self._root.rank} with {self.other} at {self.address}"
        return f"JoinedJobs({where}, epoch {self.epoch})"

    def _epoch_gangs(self, epoch: Epoch) -> EpochGangs:
        return EpochGangs(self._store, epoch, self._me, self._root.device, self._request.timeout,
                          self._blame_for)  # fmt: skip

    def _blame_for(self, members: Members) -> Blame:
        def named(what: str, cause: BaseException) -> GangError:
            self._broken = True
            transfer = Transfer(self._gangs.epoch, self._transfers, members)
            sides = dict(self._sides)
            return blame(
                self._store.calls, what, cause, sides, self._me, transfer, self._request.timeout
            )

        return named

    def _report(self, what: str) -> None:
        """This process ends: say so in the join's store (bounded)."""
        report(self._store.calls, self.job, self._sides[self.job].members[self._root.rank], what)

    def _switch(self, epoch: Epoch) -> None:
        """Leave the current epoch (its bridges closed, its keys taken out by rank 0) for
        ``epoch``, reading the other job's arrival it pairs."""
        old = self._epoch_keys()
        self._gangs.close()
        if self._root.rank == 0:
            self._store.delete(old)
        arrival = epoch.of(self.other, self.job)
        if arrival != self._sides[self.other].incarnation:
            text = peek(self._store.calls, f"side/{self.other}/{arrival}")
            if text is None:
                raise GangError(
                    f"job {self.other} arrived again twice as this job met its arrival {arrival}"
                )
            self._sides[self.other] = Side.read(text)
            self._plans.clear()
        mine = epoch.of(self.job, self.other)
        side = self._sides[self.job]
        self._sides[self.job] = Side(side.job, mine, side.plan, side.shards, side.members)
        self._gangs = self._epoch_gangs(epoch)
        self._transfers = 0
        log.info("job %s rank %d: join epoch %d", self.job, self._root.rank, epoch.number)

    def _epoch_keys(self) -> list[str]:
        return join_sides.epoch_keys(self._gangs.epoch, (self.job, self.other)) + self._gangs.keys()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")

    def _enter_next_epoch(self) -> bool:
        """Enter the epoch the last agreement found (every rank of this job found the same);
        whether the other job is in it. The plans are then both jobs' current ones.

        :raises RuntimeError: the join is closed.
        """
        self._check_open()
        epoch, ready = self._next
        if epoch != self._gangs.epoch:
            self._switch(epoch)
        return ready

    def _transfer(
        self, plan: PushPlan, tensors: dict[str, torch.Tensor], version: int | None, ready: bool
    ) -> int | None:
        """Send (``version`` given) or receive this rank's routes, in the current epoch, where
        the other job is ``ready`` in it; the version pushed, None where it was not. Every rank
        of this job learns whether every rank's routes went through, and the epoch of the next
        call.

        :raises GangError: a route failed (here or on another rank of this job).
        """
        epoch = self._gangs.epoch
        failure, got = None, None
        if ready:
            self._transfers += 1
            rank = self._root.rank
            mark(self._store.calls, self.job, rank, Transfer(epoch, self._transfers, ()))
            sender, receiver = (
                (self.job, self.other) if version is not None else (self.other, self.job)
            )
            try:
                got = cross(self._gangs, plan, sender, receiver, tensors, version, rank)
            except GangError as error:
                failure = error
        return self._agree(failure, version if version is not None else got, ready)

    def _agree(self, failure: GangError | None, version: int | None, ready: bool) -> int | None:
        """Every rank of this job: the version pushed, where every rank's routes went through
        (None where there were none); else the GangError of a failure on any rank of it (rank
        0 then arrives again, for the next epoch). With it, the epoch of the next call, as rank
        0 finds it (one collective for both)."""
        key = f"finding/{self._gangs.epoch.key}/{self.job}"
        if failure is not None:
            said = {"error": str(failure), "culprits": list(failure.culprits), "job": failure.job}
            self._store.calls.compare_set(key, "", json.dumps(said))
        failed, pushed = self._agree_next(failure is not None, version)
        if not failed:
            return pushed if ready and pushed != _NONE else None
        if failure is None:
            self._store.calls.wait([key], self._request.timeout)
            said = json.loads(self._store.calls.get(key))
            failure = GangError(said["error"])
            failure.culprits, failure.job = tuple(said["culprits"]), said["job"]
            faults.record_named(failure, time.time())  # its error file, as the finder's
            faults.note_outside(str(failure))  # and its stop line
        raise failure

    def _agree_next(self, failed: bool, version: int | None) -> tuple[bool, int]:
        """Every rank of this job: whether any rank ``failed``, the highest ``version``, and
        the epoch of the next call, as rank 0 finds it; or, where any failed or a bridge of any
        failed since the last agreement, the current epoch, over (rank 0 then arrives again,
        for the next epoch)."""
        broken, self._broken = self._broken, False
        nothing = [-1, -1, -1]
        if self._root.rank == 0:
            found, next_ready = self._lookout.look(self._sides[self.job], self._gangs.epoch)
            nothing = [found.first, found.second, int(next_ready)]
        seen = [int(failed), int(broken), _NONE if version is None else version, *nothing]
        agreed = torch.tensor(seen, dtype=torch.int64, device=self._root.device)
        self._root.all_reduce(agreed, ReduceOperation.MAX)
        any_failed, any_broken, pushed, first, second, next_ready = agreed.tolist()
        if any_failed or any_broken:
            self._next = (self._gangs.epoch, False)  # the epoch is over: the next call looks again
            if self._root.rank == 0:
                self._sides[self.job] = join_sides.arrive(self._store.calls, self._sides[self.job])
        else:
            self._next = (Epoch(first, second), bool(next_ready))
            if self._root.rank == 0:
                self._lookout.say(self._next[0], self.job)
        return bool(any_failed), int(pushed)
