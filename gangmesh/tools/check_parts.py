"""``gangmesh check --part ...``: check a job of several parts, each with its own layout, and
a bridge between them, as one rank of the job."""

from __future__ import annotations

import argparse
import io
import os
import sys
from datetime import timedelta
from typing import Any

import torch

from gangmesh.assembly.factories import create_gangs_from_layout
from gangmesh.assembly.parts import Parts, create_parts
from gangmesh.assembly.record import layout_record
from gangmesh.plan.locality import LocalityFinding
from gangmesh.plan.multipart import MultiPartPlan
from gangmesh.plan.parts import span_text
from gangmesh.runtime.environment import read_launch_environment
from gangmesh.runtime.gang import GangError, ReduceOperation
from gangmesh.runtime.ops import all_gather_objects, broadcast_flag
from gangmesh.tools.check import check_gangs, describe_failure, gather_reports, this_placement
from gangmesh.tools.check_command import COLLECTIVE_FAILED, report, root_gang, write_summary
from gangmesh.tools.check_report import Placement, nodes_text, parse_sizes
from gangmesh.tools.render import findings_text


def check_parts_as_rank(args: argparse.Namespace, plan: MultiPartPlan) -> int:
    """Take part in the check of every part as this process's rank: each part's rank 0 writes
    its part's report, which the job's rank 0 prints in part order, then the bridge's."""
    timeout = timedelta(seconds=args.timeout)
    sizes = parse_sizes(args.sizes)
    root = root_gang(args.init_method, timeout, args.device)
    try:
        sizes_by_part: dict[str, Any] = plan.parts.sizes
        parts = create_parts(
            root, placement=args.placement or None, timeout=timeout, **sizes_by_part
        )
        per_node = args.ranks_per_node or _local_world_size(args) or root.size
        placements = all_gather_objects(root, this_placement(root.rank, per_node))
        mine = _check_part(args, parts, plan, sizes, timeout, placements)
        bridged = _check_bridge(parts)
        found = all_gather_objects(root, (mine, bridged))
        passed = all(ok for (_, ok), _ in found) and all(ok is not False for _, ok in found)
        if root.rank == 0:
            reports = [part for (part, _), _ in found if part is not None]
            _print_parts(args, plan, reports, found, placements, per_node, passed)
        parts.close()
        return 0 if broadcast_flag(root, passed) else 1
    except GangError as ex:
        sys.stderr.write(f"gangmesh check: {describe_failure(ex, root.rank)}\n")
        return COLLECTIVE_FAILED


def _check_part(
    args: argparse.Namespace,
    parts: Parts,
    plan: MultiPartPlan,
    sizes: list[int],
    timeout: timedelta,
    placements: list[Placement],
) -> tuple[dict[str, Any] | None, bool]:
    """This process's part checked: (its report, whether it passed) on the part's rank 0,
    (None, True) elsewhere."""
    layout = plan.plan(parts.name).layout
    gangs = create_gangs_from_layout(
        parts.root, layout, timeout=timeout, placement=args.placement or None
    )
    ranks = parts.ranks(parts.name)
    record = layout_record(gangs)
    reports = check_gangs(gangs, gangs.plan, sizes, args.iters, global_ranks=ranks)
    everything = gather_reports(gangs, reports)
    gangs.close()
    if everything is None:
        return None, True
    text = io.StringIO()
    print(f"part {parts.name}: {span_text(range(ranks[0], ranks[-1] + 1))}", file=text)
    passed, summary = report(args, gangs.root, gangs.plan, everything, sizes, placements,
                             record, text)  # fmt: skip
    return {"name": parts.name, "ranks": ranks, "text": text.getvalue(), **summary}, passed


def _local_world_size(args: argparse.Namespace) -> int | None:
    """Processes per node as the launcher says, where it says."""
    if args.init_method:
        return int(os.environ["LOCAL_WORLD_SIZE"])
    env = read_launch_environment()
    return env.local_world_size if env else None


def _check_bridge(parts: Parts) -> bool | None:
    """A bridge of every part's first rank: a broadcast from the first part's reaches them
    all, and their all_reduce sums their global ranks. None off the bridge."""
    firsts = {name: [parts.ranks(name)[0]] for name in parts.plan.names}
    bridge = parts.bridge(**firsts)
    if bridge is None:
        return None
    members = [ranks[0] for ranks in firsts.values()]
    value = torch.tensor([float(members[bridge.rank])], device=bridge.device)
    bridge.broadcast(value, 0)
    total = torch.tensor([float(members[bridge.rank])], device=bridge.device)
    bridge.all_reduce(total, ReduceOperation.SUM)
    return value.item() == members[0] and total.item() == sum(members)


def _print_parts(
    args: argparse.Namespace,
    plan: MultiPartPlan,
    reports: list[dict[str, Any]],
    found: list[tuple[tuple[dict[str, Any] | None, bool], bool | None]],
    placements: list[Placement],
    per_node: int,
    passed: bool,
) -> None:
    """Print each part's report, the nodes, each part's locality findings, the bridge's line
    and the verdict; write the JSON."""
    out = sys.stdout if args.json != "-" else sys.stderr
    for part in reports:
        print(part.pop("text"), file=out)
    nodes, _ = nodes_text(placements)
    print(nodes, file=out)
    findings: dict[str, list[LocalityFinding]] = {}
    if plan.parts.world_size % per_node == 0:
        findings = plan.check_locality(per_node)
    else:
        print(f"locality: not checked ({per_node} ranks per node do not divide the job)", file=out)
    for name, found_here in findings.items():
        lines = findings_text(found_here)
        print("\n".join(f"part {name}: {line}" for line in lines), file=out)
    bridge = [rank for rank, (_, ok) in enumerate(found) if ok is not None]
    bridged = all(found[rank][1] for rank in bridge)
    verdict = "broadcast and all_reduce reach every member" if bridged else "FAILED"
    print(f"bridge of each part's first rank {bridge}: {verdict}", file=out)
    names = ", ".join(part["name"] for part in reports)
    print(f"{'PASSED' if passed else 'FAILED'}: parts {names} and their bridge", file=out)
    summary = {
        "parts": reports,
        "bridge": {"ranks": bridge, "passed": bridged},
        "locality_findings": {
            name: [f.message for f in found_here] for name, found_here in findings.items()
        },
    }
    write_summary(args.json, summary)
