"""Where ``gangmesh check`` goes: local workers, this rank of a launched job, parts, or
replica groups. Imports torch only once a check runs."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from gangmesh.plan.layout import Layout
from gangmesh.runtime.environment import read_launch_environment
from gangmesh.tools.failure import Failure
from gangmesh.tools.parts_command import parts_of
from gangmesh.tools.plan_command import layout_of


def run_check(args: argparse.Namespace, argv: list[str], main: Callable[[list[str]], int]) -> int:
    """Launch local workers, or take part as this rank of a distributed job; ``main`` is the
    ``gangmesh`` command's entry point, which each local worker runs."""
    from gangmesh.tools.check_command import check_as_rank, check_locally

    if args.iters < 1 or args.timeout <= 0:
        raise ValueError(
            f"--iters and --timeout: expected positive values, got {args.iters}, {args.timeout}"
        )
    env = None if args.init_method else read_launch_environment()
    launched = bool(args.init_method) or (env is not None and env.world_size > 1)
    _check_replica_options(args, launched)
    if not args.part:
        args.nproc = 4 if args.nproc is None else args.nproc
        layout = layout_of(args)
        if args.replica_groups is not None:
            from gangmesh.tools.check_replicas import check_replica_groups_locally

            return check_replica_groups_locally(args, layout, argv)
        return check_as_rank(args, layout) if launched else check_locally(args, layout, argv, main)
    from gangmesh.tools.check_parts import check_parts_as_rank  # imports torch: not for plan

    if args.inject_rank is not None:
        raise Failure("--inject-rank: not with --part")
    if args.init_method:  # a local worker: the launcher set the world size
        args.world_size = int(os.environ["WORLD_SIZE"])
    else:
        args.world_size = env.world_size if launched and env else args.nproc
    plan, _ = parts_of(args, "--nproc")
    if launched:
        return check_parts_as_rank(args, plan)
    args.nproc = plan.parts.world_size
    return check_locally(args, Layout(), argv, main)


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
        from gangmesh.assembly.replicas import lighthouse_address  # torch: not for `plan`

        try:
            lighthouse_address(lighthouse)
        except ValueError as ex:
            raise Failure(f"--{ex}") from ex
    if args.dp_replicate != 1:
        raise Failure(
            f"--dp-replicate: expected 1 with replica groups (the groups are the replicate "
            f"dimension; the sizes are one group's), got {args.dp_replicate}"
        )
