"""Check, on every process, that the gangs are the planned ones and that they communicate.

:mod:`gangmesh.tools.check_report` turns what every process found into the report.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence

import torch
import torch.distributed as dist

from gangmesh.assembly.gangs import Gangs
from gangmesh.plan.dims import ROOT
from gangmesh.plan.placement import this_site
from gangmesh.plan.topology import MeshTopology
from gangmesh.runtime.gang import Gang, GangError, ReduceOperation
from gangmesh.runtime.managed_gang import ManagedGang
from gangmesh.runtime.ops import all_gather_objects
from gangmesh.tools.check_report import GangReport, Placement, checked_gangs


def check_gangs(
    gangs: Gangs,
    plan: MeshTopology,
    sizes: Sequence[int],
    iters: int,
    *,
    late: float = 0.0,
    global_ranks: Sequence[int] | None = None,
) -> list[GangReport]:
    """Check memberships and collectives of every gang built; time all_reduce per size and
    who arrives last at ``iters`` barriers.

    Every process must call it with the same arguments, except ``late``: seconds this
    process spends before each barrier it times (a straggler, for fault injection).
    ``global_ranks`` are the global ranks of the plan's ranks, where the gangs are a part's
    (default: the plan's ranks are the job's). Problems are described, not raised;
    GangError still propagates when a peer dies or hangs.
    """
    to_global = list(range(plan.world_size)) if global_ranks is None else list(global_ranks)
    local = gangs.root.rank
    rank = to_global[local]
    reports = []
    built = [name for name in gangs if not isinstance(gangs[name], ManagedGang)]  # checked apart
    checked = [name for name in checked_gangs(plan) if name == ROOT or name in built]
    for step, name in enumerate(checked, start=1):
        gang = gangs[name]
        if local == 0:
            print(f"[{step}/{len(checked)}] checking {name} (size {gang.size})...",
                  file=sys.stderr, flush=True)  # fmt: skip
        group = range(plan.world_size) if name == ROOT else plan.group_of(local, name)
        members = [to_global[r] for r in group]
        report = GangReport(name, gang.size, members=members)
        report.problems.extend(_membership_problems(gang, members, rank))
        if not report.problems:
            report.problems.extend(_collective_problems(gang, members, rank))
            if gang.size > 1:
                report.timings = _time_all_reduce(gang, sizes, iters)
                report.iters = iters
                _time_arrivals(gang, members, iters, late, report)
        reports.append(report)
    reports[0].communicators = len(gangs.communicators())
    return reports


def _membership_problems(gang: Gang, members: list[int], rank: int) -> list[str]:
    actual = (
        members
        if not gang.supports_process_group
        else (dist.get_process_group_ranks(gang.as_process_group()))
    )
    if gang.size != len(members) or gang.rank != members.index(rank) or actual != members:
        return [
            f"membership: expected ranks {members} with this process at {members.index(rank)}, "
            f"got {actual} at {gang.rank}"
        ]
    return []


def _collective_problems(gang: Gang, members: list[int], rank: int) -> list[str]:
    problems = []
    total = torch.tensor([float(rank)], dtype=torch.float64, device=gang.device)
    gang.all_reduce(total, ReduceOperation.SUM)
    if total.item() != sum(members):
        problems.append(f"all_reduce: expected the sum {sum(members)}, got {total.item()}")
    gathered = torch.empty(gang.size, dtype=torch.int64, device=gang.device)
    gang.all_gather(gathered, torch.tensor([rank], device=gang.device))
    if gathered.tolist() != members:
        problems.append(f"all_gather: expected {members}, got {gathered.tolist()}")
    exchanged = torch.empty(gang.size, dtype=torch.int64, device=gang.device)
    gang.all_to_all(exchanged, torch.full((gang.size,), rank, device=gang.device))
    if exchanged.tolist() != members:
        problems.append(f"all_to_all: expected {members}, got {exchanged.tolist()}")
    scattered = torch.empty(1, dtype=torch.float64, device=gang.device)
    gang.reduce_scatter(
        scattered,
        torch.arange(gang.size, dtype=torch.float64, device=gang.device) + rank,
        ReduceOperation.SUM,
    )
    want = sum(members) + gang.size * members.index(rank)
    if scattered.item() != want:
        problems.append(f"reduce_scatter: expected {want}, got {scattered.item()}")
    source = gang.size - 1
    value = torch.tensor([rank], device=gang.device)
    gang.broadcast(value, source_rank=source)
    if value.item() != members[source]:
        problems.append(
            f"broadcast(source_rank={source}): expected {members[source]}, got {value.item()}"
        )
    gang.barrier()
    return problems


def _time_all_reduce(gang: Gang, sizes: Sequence[int], iters: int) -> dict[int, float]:
    timings = {}
    for size in sizes:
        tensor = torch.ones(size // 4, dtype=torch.float32, device=gang.device)
        gang.all_reduce(tensor, ReduceOperation.SUM)  # warm-up
        gang.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            gang.all_reduce(tensor, ReduceOperation.SUM)
        if tensor.is_cuda:
            torch.cuda.synchronize(tensor.device)
        timings[size] = (time.perf_counter() - start) / iters
    return timings


def _time_arrivals(
    gang: Gang, members: list[int], rounds: int, late: float, report: GangReport
) -> None:
    """Who arrives last at each of ``rounds`` barriers, and how late.

    Clocks of different hosts do not agree, so arrival times are not compared: each
    member times its own wait in the barrier, and the member that waited least arrived
    last, later than the first by the difference between the longest and shortest wait.
    """
    waits = torch.empty(rounds, dtype=torch.float64)
    for i in range(rounds):
        if late:
            time.sleep(late)
        start = time.perf_counter()
        gang.barrier()
        waits[i] = time.perf_counter() - start
    everyone = torch.empty(gang.size * rounds, dtype=torch.float64, device=gang.device)
    gang.all_gather(everyone, waits.to(gang.device))
    matrix = everyone.view(gang.size, rounds).cpu()
    shortest, last = matrix.min(dim=0)
    report.last = [members[i] for i in last.tolist()]
    report.lateness = (matrix.max(dim=0).values - shortest).tolist()
    report.own_wait = shortest.tolist()


def gather_reports(gangs: Gangs, reports: list[GangReport]) -> list[list[GangReport]] | None:
    """Every process's reports on rank 0 (None elsewhere)."""
    everything = all_gather_objects(gangs.root, reports)
    return everything if gangs.root.rank == 0 else None


def this_placement(rank: int, local_world_size: int) -> Placement:
    """This process's site (:func:`~gangmesh.plan.placement.this_site`) and node: GROUP_RANK
    (torchrun), SLURM_NODEID, else from the rank."""
    site = this_site()
    for name in ("GROUP_RANK", "SLURM_NODEID"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return Placement(site, int(value))
    return Placement(site, rank // max(1, local_world_size))


def describe_failure(ex: GangError, rank: int) -> str:
    """One line for a communication failure seen by ``rank``."""
    return f"rank {rank}: {ex}".splitlines()[0]
