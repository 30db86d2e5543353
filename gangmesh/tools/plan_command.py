"""``gangmesh plan``: print a layout's gangs (table, JSON or SVG) and its locality report.

This module needs numpy only.
"""

from __future__ import annotations

import argparse
import json
import sys

from gangmesh.plan._checks import MAX_LISTED_RANKS
from gangmesh.plan.cluster import Cluster
from gangmesh.plan.dims import SIZE_NAMES
from gangmesh.plan.layout import Layout
from gangmesh.plan.locality import LocalityFinding, check_ranks_per_node
from gangmesh.plan.topology import MeshTopology
from gangmesh.tools.failure import Failure
from gangmesh.tools.join_command import join_output
from gangmesh.tools.parts_command import check_cluster_options, parts_output
from gangmesh.tools.render import finding_label, plan_json, plan_table, replica_title
from gangmesh.tools.svg import plan_svg

FINDINGS_EXIT = 1
"""Exit code of ``gangmesh plan --strict`` when a locality finding is one to fix."""


def layout_of(args: argparse.Namespace) -> Layout:
    """The layout given on the command line.

    :raises ValueError: a size or the order is not one a layout accepts.
    """
    sizes = {name: getattr(args, name) for name in SIZE_NAMES}
    return Layout(**sizes, order=args.order, expert=args.expert)


def run_plan(args: argparse.Namespace) -> int:
    """Print, or write to ``--output``, the plan in the chosen format; the exit status."""
    if args.json_content is not None and args.format != "json":
        raise Failure(f"--json-content: applies to --format json only, got {args.format}")
    if args.strict and args.ranks_per_node is None:
        raise Failure("--strict: checks locality, which needs --ranks-per-node")
    if args.part and args.replica_groups is not None:
        raise Failure("--replica-groups: not with --part (each replica group is one launch)")
    to_fix: list[str] = []
    if args.job:
        text = join_output(args)
    elif args.part:
        text, to_fix = parts_output(args)
    elif args.world_size is None:
        raise Failure("the following arguments are required: --world-size (or --part, --job)")
    else:
        _check_replica_groups(args)
        text, to_fix = _plan_output(args)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as out:
                out.write(text)
        except OSError as ex:
            raise Failure(f"--output: cannot write {args.output}: {ex.strerror or ex}") from ex
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    if args.strict and to_fix:
        sys.stderr.write(
            f"gangmesh plan: --strict: locality findings to fix: {', '.join(to_fix)}\n"
        )
        return FINDINGS_EXIT
    return 0


def _plan_output(args: argparse.Namespace) -> tuple[str, list[str]]:
    """The text of the plan of one layout, and the findings to fix (labels)."""
    plan = MeshTopology.from_layout(args.world_size, layout_of(args))
    if plan.world_size > MAX_LISTED_RANKS:  # every format lists groups
        raise Failure(
            f"--world-size: gangmesh plan lists groups, of at most {MAX_LISTED_RANKS} (2**26) "
            f"ranks; got {plan.world_size} (MeshTopology answers larger worlds per rank)"
        )
    if args.rank is not None:
        plan.coordinate(args.rank)
    per_node = args.ranks_per_node
    if per_node is not None:
        check_ranks_per_node(plan.world_size, per_node)
    wider = _wider_findings(plan, args)
    groups = args.replica_groups
    if args.format == "json":
        content = args.json_content or "all"
        text = plan_json(plan, ranks_per_node=per_node, rank=args.rank, content=content)
        if wider is not None:
            text = _with_wider_json(text, args, wider)
        if groups is not None:
            text = json.dumps({**json.loads(text), "replica_groups": groups}) + "\n"
    elif args.format == "svg":
        text = plan_svg(plan, ranks_per_node=per_node, rank=args.rank, replica_groups=groups)
    else:
        text = plan_table(plan, ranks_per_node=per_node, rank=args.rank)
        if wider is not None:
            text += "".join(f"{line}\n" for line in _wider_text(args, wider))
        if groups is not None:
            text = f"{replica_title(plan, groups)}, {groups * plan.world_size} in all:\n{text}"
    to_fix = [] if per_node is None else [f for f in plan.check_locality(per_node) if f.avoidable]
    to_fix += [f for f in wider or [] if f.avoidable]
    return text, [f.dim + ("" if f.level == "node" else f" ({f.level})") for f in to_fix]


def _check_replica_groups(args: argparse.Namespace) -> None:
    """--replica-groups: a count, with a layout of one group (no dp_replicate of its own)."""
    if args.replica_groups is None:
        return
    if args.replica_groups < 1:
        raise Failure(f"--replica-groups: expected an int >= 1, got {args.replica_groups}")
    if args.dp_replicate != 1:
        raise Failure(
            f"--dp-replicate: expected 1 with --replica-groups (the replica groups are the "
            f"replicate dimension; the sizes are one group's), got {args.dp_replicate}"
        )


def _wider_findings(plan: MeshTopology, args: argparse.Namespace) -> list[LocalityFinding] | None:
    """The domain and rack findings that --hosts-per-domain and --domains-per-rack ask for;
    None where neither is given."""
    if not check_cluster_options(args):
        return None
    cluster = Cluster.uniform(plan.world_size, args.ranks_per_node, args.hosts_per_domain,
                              args.domains_per_rack)  # fmt: skip
    return [f for f in plan.check_locality(cluster) if f.level != "node"]


def _wider_text(args: argparse.Namespace, findings: list[LocalityFinding]) -> list[str]:
    """The lines of the domain and rack report."""
    domain = args.ranks_per_node * args.hosts_per_domain
    units = f"domains of {domain} ranks"
    if args.domains_per_rack is not None:
        units += f", racks of {domain * args.domains_per_rack} ranks"
    if not findings:
        return [f"locality ({units}): no checked gang crosses a domain or a rack"]
    return [f"locality ({units}):", *(f"  - {finding_label(f)}: {f}" for f in findings)]


def _with_wider_json(text: str, args: argparse.Namespace, findings: list[LocalityFinding]) -> str:
    """The JSON document with the domain and rack sizes and findings added."""
    document = json.loads(text)
    document["hosts_per_domain"] = args.hosts_per_domain
    document["domains_per_rack"] = args.domains_per_rack
    document["locality_findings"] = document.get("locality_findings", []) + [
        {
            "dim": f.dim,
            "level": f.level,
            "group": f.group,
            "units": f.nodes,
            "avoidable": f.avoidable,
            "message": f.message,
        }
        for f in findings
    ]
    return json.dumps(document) + "\n"
