"""Where ``gangmesh check`` goes: local workers, this rank of a launched job, parts, or
replica groups. Imports torch only once a check runs."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable

from gangmesh.assembly.lighthouse_contact import lighthouse_address
from gangmesh.plan.cluster import check_ranks_per_node
from gangmesh.plan.layout import Layout
from gangmesh.plan.topology import MeshTopology
from gangmesh.runtime.environment import read_launch_environment
from gangmesh.tools.check_report import parse_sizes
from gangmesh.tools.failure import Failure
from gangmesh.tools.parts_command import parts_of
from gangmesh.tools.plan_command import layout_of


def run_check(args: argparse.Namespace, argv: list[str], main: Callable[[list[str]], int]) -> int:
    """Launch local workers, or take part as this rank of a distributed job; ``main`` is the
    ``gangmesh`` command's entry point, which each local worker runs. Every argument is
    checked before torch is imported (an error answers at once)."""
    _check_numbers(args)
    env = None if args.init_method else read_launch_environment()
    launched = bool(args.init_method) or (env is not None and env.world_size > 1)
    _check_replica_options(args, launched)
    if not args.part:
        args.nproc = 4 if args.nproc is None else args.nproc
        layout = layout_of(args)
        if not launched:
            _check_local_world(args, layout)
        if args.replica_groups is not None:
            from gangmesh.tools.check_replicas import check_replica_groups_locally

            return check_replica_groups_locally(args, argv)
        from gangmesh.tools.check_command import check_as_rank, check_locally

        return check_as_rank(args, layout) if launched else check_locally(args, layout, argv, main)
    if args.inject_rank is not None:
        raise Failure("--inject-rank: not with --part")
    if args.init_method:  # a local worker: the launcher set the world size
        args.world_size = int(os.environ["WORLD_SIZE"])
    else:
        args.world_size = env.world_size if launched and env else args.nproc
    plan, _ = parts_of(args, "--nproc")
    if launched:
        from gangmesh.tools.check_parts import check_parts_as_rank  # imports torch: not for plan

        return check_parts_as_rank(args, plan)
    args.nproc = plan.parts.world_size
    _check_local_world(args, None)
    from gangmesh.tools.check_command import check_locally

    return check_locally(args, Layout(), argv, main)


def _check_numbers(args: argparse.Namespace) -> None:
    """--iters, --timeout and --sizes, each named where it is wrong."""
    if args.iters < 1:
        raise Failure(f"--iters: expected an int >= 1, got {args.iters}")
    if not 0 < args.timeout < math.inf:
        raise Failure(f"--timeout: expected a positive number of seconds, got {args.timeout:g}")
    parse_sizes(args.sizes)


def _check_local_world(args: argparse.Namespace, layout: Layout | None) -> None:
    """The --nproc local processes: at least one, holding ``layout`` (None: the parts, checked
    already) on nodes of --ranks-per-node."""
    if args.nproc < 1:
        raise Failure(f"--nproc: expected an int >= 1, got {args.nproc}")
    if layout is not None:
        MeshTopology.from_layout(args.nproc, layout)
    if args.ranks_per_node is not None:
        check_ranks_per_node(args.nproc, args.ranks_per_node)


def _check_replica_options(args: argparse.Namespace, launched: bool) -> None:
    """--replica-groups (local runs only) and --lighthouse: with neither --part nor a
    dp_replicate of their own."""
    groups, lighthouse = args.replica_groups, args.lighthouse
    if groups is None and lighthouse is None:
        return
    if args.part:
        raise Failure("--replica-groups, --lighthouse: not with --part")
    if groups is not None and lighthouse is not None:
        raise Failure("--replica-groups: starts its own lighthouse; not with --lighthouse")
    if groups is not None and launched:
        raise Failure(
            "--replica-groups: runs the groups on this machine; under a launcher, start each "
            "group as a launch of its own with --lighthouse and GANGMESH_REPLICA_GROUP"
        )
    if groups is not None and groups < 1:
        raise Failure(f"--replica-groups: expected an int >= 1, got {groups}")
    if lighthouse is not None:
        try:
            lighthouse_address(lighthouse)
        except ValueError as ex:
            raise Failure(f"--{ex}") from ex
    if args.dp_replicate != 1:
        raise Failure(
            f"--dp-replicate: expected 1 with replica groups (the groups are the replicate "
            f"dimension; the sizes are one group's), got {args.dp_replicate}"
        )
