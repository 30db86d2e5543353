"""join_jobs: a job meets another job, launched apart, at a join server."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import torch

from gangmesh.assembly import join_meeting
from gangmesh.assembly.join_setup import check_request
from gangmesh.assembly.join_sides import Member, Side, arrive
from gangmesh.assembly.join_store import JoinStore
from gangmesh.assembly.joined import JoinedJobs
from gangmesh.plan.layout import Layout
from gangmesh.plan.shards import TensorShards
from gangmesh.plan.topology import MeshTopology
from gangmesh.runtime.gang import Gang, GangError
from gangmesh.runtime.ops import all_gather_objects

log = logging.getLogger("gangmesh")


def join_jobs(
    root_gang: Gang,
    *,
    job: str,
    other: str,
    address: str,
    plan: MeshTopology | Layout | Mapping[str, Any],
    shards: Mapping[str, TensorShards] | None = None,
    timeout: timedelta | None = None,
    wait: timedelta | None = None,
) -> JoinedJobs:
    """Join this job (``job``) with job ``other``, launched apart, at the join server at
    ``address``; every rank of this job calls it. It returns once both jobs are in one epoch::

        joined = gm.join_jobs(root, job="trainer", other="generator",
                              address="10.0.0.1:29600", plan=gangs.plan, shards=shards)

    :param root_gang: this job's root gang (from :func:`~gangmesh.setup_root_gang`).
    :param job: this job's name in the join.
    :param other: the other job's name (it calls ``join_jobs`` with the two swapped).
    :param address: ``host:port`` of a join server (``gangmesh join-server``).
    :param plan: this job's plan: ``gangs.plan``, a Layout, or create_gangs' keywords.
    :param shards: tensor name -> how this job holds it (:class:`~gangmesh.TensorShards`),
        for pushes in either direction; the other job names the same tensors.
    :param timeout: the timeout of every collective across the join (default 60 s, at most
        the root gang's less 5 s): also how long a receive waits for the push it meets.
    :param wait: how long to wait for the other job (default: ``timeout``).
    :raises TypeError, ValueError: an argument that is not so, naming it (before any process
        waits); shards unlike the other job's (once met: on both jobs).
    :raises GangError: no join server answers, the other job did not come within ``wait``
        (named, with its rank 0 where it arrived), or a rank of this job did not come.
    """
    request = check_request(root_gang, job, other, address, plan, shards, timeout, wait)
    root = request.root
    store = JoinStore(request.address, request.name, request.timeout)
    try:
        members = tuple(all_gather_objects(root, Member.this_process(root.rank)))
        side = Side(request.job, 0, request.plan, request.shards, members)
        arrival = torch.zeros(1, dtype=torch.int64, device=root.device)
        if root.rank == 0:
            side = arrive(store.calls, side)
            # said by processes before these; the last arrival's meeting, if some did not read it
            told = join_meeting.meeting_key(request.job, side.incarnation - 1)
            store.delete([f"reports/{request.job}", told, f"{told}/read"])
            arrival.fill_(side.incarnation)
        root.broadcast(arrival, 0)
        side = Side(side.job, int(arrival.item()), side.plan, side.shards, side.members)
        if root.rank == 0:
            try:
                met = join_meeting.first_epoch(
                    store.calls, side, request.other, request.wait, request.address
                )
            except GangError as error:
                join_meeting.publish(store.calls, side, root.size, error)
                raise
            join_meeting.publish(store.calls, side, root.size, met)
        else:
            met = join_meeting.outcome(
                store.calls, side.job, side.incarnation, root.size, request.wait * 2
            )
        epoch, found = met
    except BaseException:
        store.close()
        raise
    log.info(
        "job %s rank %d joined job %s in epoch %d",
        request.job,
        root.rank,
        request.other,
        epoch.number,
    )
    joined = JoinedJobs(request, store, side, found, epoch)
    try:  # both directions' routes: shards unlike the other job's are refused here
        joined.push_plan(request.job)
        joined.push_plan(request.other)
    except ValueError:
        joined.close()
        raise
    return joined
