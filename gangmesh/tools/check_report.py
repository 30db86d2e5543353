"""What rank 0 makes of every rank's findings in ``gangmesh check``: the table, the JSON
summary, the nodes and the stragglers; and the message sizes the check is given.

This module imports nothing of torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gangmesh.plan.cluster import Cluster, Site
from gangmesh.plan.dims import FACTS, GANG_NAMES, ROOT
from gangmesh.plan.topology import MeshTopology

CHECKED_GANGS: tuple[str, ...] = (ROOT, *GANG_NAMES)
"""The gangs the report lists, in its order."""
_EXPERT_GANGS = frozenset(name for name, facts in FACTS.items() if facts.expert)


def checked_gangs(plan: MeshTopology) -> tuple[str, ...]:
    """The gangs checked for ``plan``: a job without experts builds no expert gangs."""
    if plan.uses_experts:
        return CHECKED_GANGS
    return tuple(name for name in CHECKED_GANGS if name not in _EXPERT_GANGS)


_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def parse_sizes(text: str) -> list[int]:
    """Message sizes in bytes from ``"8,1K,1M"``; ValueError for anything else."""
    sizes = []
    for item in text.split(","):
        item = item.strip().upper().removesuffix("B")
        unit = item[-1:] if item[-1:] in _UNITS else ""
        number = item[: len(item) - len(unit)]
        if not number.isdigit() or int(number) * _UNITS[unit] < 4:
            raise ValueError(
                f"sizes: expected sizes of at least 4 bytes such as 8,1K,1M, got {text!r}"
            )
        sizes.append(int(number) * _UNITS[unit])
    return sizes


@dataclass
class GangReport:
    """What one process found on one gang."""

    name: str
    size: int
    problems: list[str] = field(default_factory=list)
    timings: dict[int, float] = field(default_factory=dict)
    """Message size in bytes -> mean all_reduce seconds."""
    communicators: int = 0
    """Communicators this process holds (set on the root's report only)."""
    iters: int = 0
    """Timed all_reduces per message size (0 when nothing was timed)."""
    members: list[int] = field(default_factory=list)
    """The global ranks of this process's group."""
    last: list[int] = field(default_factory=list)
    """Per barrier round, the global rank that arrived last (the same on every member)."""
    lateness: list[float] = field(default_factory=list)
    """Per barrier round, seconds between the first and the last arrival."""
    own_wait: list[float] = field(default_factory=list)
    """Per barrier round, seconds the last rank itself waited: what the barrier costs."""


def bus_bandwidth(size_bytes: int, seconds: float, n: int) -> float:
    """all_reduce bus bandwidth in GB/s, as nccl-tests defines it: size/time * 2(n-1)/n."""
    return size_bytes / seconds * 2 * (n - 1) / n / 1e9


def summarize(
    plan: MeshTopology, everything: list[list[GangReport]], sizes: Sequence[int]
) -> tuple[str, list[str], dict[str, Any]]:
    """The report table, the failures (one line each) and a JSON-ready summary."""
    failures = [
        f"gang {report.name} on rank {rank}: {problem}"
        for rank, reports in enumerate(everything)
        for report in reports
        for problem in report.problems
    ]
    iters = max((r.iters for reports in everything for r in reports), default=0)
    widest = max(sizes)
    lines = [
        "checked: membership; all_reduce, all_gather, all_to_all, reduce_scatter,",
        "  broadcast (from each gang's last rank) and barrier, with known values",
    ]
    if iters:
        lines += [
            f"timed: all_reduce, the slowest rank's mean of {_plural(iters, 'iteration')} "
            "per size (us);",
            f"  GB/s: bus bandwidth at {_size_text(widest)}, as nccl-tests defines it",
            f"{'gang':<5} {'size':>5} {'groups':>6} {'check':<5}"
            + "".join(f" {_size_text(s) + ' us':>8}" for s in sizes)
            + f" {'GB/s':>7}",
        ]
    summary: dict[str, Any] = {
        "world_size": plan.world_size,
        "sizes": plan.sizes(),
        "order": list(plan.order),
        "iters": iters,
        "gangs": {},
    }
    single: list[str] = []
    for index, checked in enumerate(everything[0]):  # the gangs checked, in CHECKED_GANGS order
        name = checked.name
        reports = [reports[index] for reports in everything]
        size = reports[0].size
        groups = 1 if name == ROOT else plan.group_count(name)
        ok = not any(r.problems for r in reports)
        entry: dict[str, Any] = {"size": size, "groups": groups, "pass": ok, "sizes": {}}
        summary["gangs"][name] = entry
        if size == 1 and ok:
            single.append(name)
            continue
        row = f"{name:<5} {size:>5} {groups:>6} {'pass' if ok else 'FAIL':<5}"
        busbw_text = "-"
        for s in sizes:
            times = [r.timings[s] for r in reports if s in r.timings]
            if not times:
                row += f" {'-':>8}"
                continue
            slowest = max(times)
            busbw = bus_bandwidth(s, slowest, size)
            row += f" {slowest * 1e6:>8.1f}"
            entry["sizes"][s] = {"latency_us": slowest * 1e6, "busbw_GB_per_s": busbw}
            if s == widest:
                busbw_text = f"{busbw:.3f}"
        lines.append(row + f" {busbw_text:>7}")
    if single:
        lines.append(f"size 1 (pass): {', '.join(single)}")
    counts = [reports[0].communicators for reports in everything]
    summary["communicators_per_process"] = counts
    lines.append(
        f"communicators per process: {min(counts)}"
        + (f" to {max(counts)}" if max(counts) != min(counts) else "")
        + " (one per distinct set of ranks, root included)"
    )
    summary["failures"] = failures
    return "\n".join(lines) + "\n", failures, summary


def _plural(count: int, noun: str) -> str:
    """``"1 rank"``, ``"2 ranks"``."""
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _size_text(size: int) -> str:
    for unit in ("G", "M", "K"):
        if size % _UNITS[unit] == 0:
            return f"{size // _UNITS[unit]}{unit}"
    return f"{size}B"


@dataclass(frozen=True)
class Placement:
    """Where one rank runs: its site (host, domain, rack), and its node as the launcher
    numbers nodes."""

    site: Site
    node: int

    @property
    def host(self) -> str:
        """The host."""
        return self.site.host


def cluster_of(placements: Sequence[Placement]) -> Cluster:
    """The cluster the ranks' placements describe: one node per distinct host and launcher
    node (several launchers on one host are several nodes)."""
    hosts = {p.host for p in placements}
    nodes = {(p.host, p.node) for p in placements}
    if len(nodes) == len(hosts):
        return Cluster.of_sites([p.site for p in placements])
    return Cluster.of_sites(
        [dataclasses.replace(p.site, host=f"{p.host} node {p.node}") for p in placements]
    )


def nodes_text(placements: list[Placement]) -> tuple[str, list[str]]:
    """A line per node (a launcher's node on one host) with its ranks, and a note for each
    node whose ranks are not one consecutive block (locality is then judged from the hosts
    each rank reported)."""
    units: dict[tuple[str, int], list[int]] = {}
    for rank, placement in enumerate(placements):
        units.setdefault((placement.host, placement.node), []).append(rank)
    numbered = len({node for _, node in units}) == len(units)
    lines, notes = [], []
    for (host, node), ranks in units.items():
        name = f"node {node}" if numbered else f"host {host}"
        span = f"ranks {ranks[0]}-{ranks[-1]}" if len(ranks) > 1 else f"rank {ranks[0]}"
        consecutive = ranks == list(range(ranks[0], ranks[-1] + 1))
        lines.append(
            f"  {name}{f' on {host}' if numbered else ''}: "
            + (span if consecutive else "ranks " + ", ".join(map(str, ranks)))
        )
        if not consecutive:
            notes.append(f"{name}: ranks {ranks} are not consecutive")
    counts = sorted({len(ranks) for ranks in units.values()})
    each = " / ".join(map(str, counts)) + (" rank" if counts == [1] else " ranks")
    header = (
        f"nodes: 1 of {_plural(counts[0], 'rank')}"
        if len(units) == 1
        else f"nodes: {len(units)}, {each} each"
    )
    return "\n".join([header, *lines]), notes


STRAGGLER_SHARE = 0.8
"""A rank is flagged as consistently slowest when it arrives last at this share of a group's
barriers (at least 5), later than the first by more than a barrier costs, in the median."""


def stragglers(
    everything: list[list[GangReport]], placements: list[Placement]
) -> tuple[list[str], dict[str, Any]]:
    """Per gang, the rank that arrived last most often at its barriers and by how much, in
    the group where it was latest (a consistently slowest rank first); lines for people
    and a JSON-ready dict."""
    lines: list[str] = []
    found: dict[str, dict[str, Any]] = {}
    for index, checked in enumerate(everything[0]):
        name = checked.name
        groups = {tuple(r.members): r for r in (reports[index] for reports in everything)}
        worst: dict[str, Any] | None = None
        for report in groups.values():
            if not report.last:
                continue
            rank = max(set(report.last), key=report.last.count)
            rounds = [i for i, who in enumerate(report.last) if who == rank]
            late = float(np.median([report.lateness[i] for i in rounds]))
            cost = float(np.median([report.own_wait[i] for i in rounds]))
            entry: dict[str, Any] = {
                "rank": rank,
                "host": placements[rank].host,
                "group": report.members,
                "last_in": len(rounds),
                "rounds": len(report.last),
                "median_lateness_ms": late * 1e3,
                "consistent": len(report.last) >= 5
                and len(rounds) >= STRAGGLER_SHARE * len(report.last)
                and late > cost,
            }
            if worst is None or (entry["consistent"], late) > (
                worst["consistent"],
                worst["median_lateness_ms"] / 1e3,
            ):
                worst = entry
        if worst is None:
            continue
        found[name] = worst
        lines.append(
            f"  {name:<5} rank {worst['rank']} on {worst['host']}: last at {worst['last_in']} "
            f"of {worst['rounds']} barriers, {worst['median_lateness_ms']:.2f} ms after the first"
        )
    slow: dict[tuple[int, str], list[str]] = {}
    for name, entry in found.items():
        if entry["consistent"]:
            slow.setdefault((entry["rank"], entry["host"]), []).append(name)
    for (rank, host), names in slow.items():
        lines.append(f"consistently slowest: rank {rank} on {host} (in {', '.join(names)})")
    if lines:
        lines.insert(0, "last to arrive at each gang's barriers (median lateness):")
    return lines, found
