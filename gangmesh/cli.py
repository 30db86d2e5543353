"""The ``gangmesh`` command: ``plan`` a layout, ``check`` a cluster."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from gangmesh.environment import read_launch_environment
from gangmesh.render import plan_json, plan_svg, plan_table
from gangmesh.topology import MeshTopology

USAGE_ERROR = 2


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message}\n")


def _add_dim_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("parallel dimensions (one may be -1: inferred)")
    group.add_argument("--pp", type=int, default=1, help="pipeline parallel size")
    group.add_argument("--dp-replicate", type=int, default=1, help="replicated data parallel size")
    group.add_argument("--dp-shard", type=int, default=-1, help="sharded data parallel size")
    group.add_argument("--cp", type=int, default=1, help="context parallel size")
    group.add_argument("--tp", type=int, default=1, help="tensor parallel size")
    group.add_argument("--ep", type=int, default=1, help="expert parallel size")
    group.add_argument("--etp", type=int, default=1, help="expert tensor parallel size: 1 or tp")
    group.add_argument(
        "--order",
        help="the dense dimensions outermost first, e.g. pp,dp_replicate,dp_shard,cp,tp",
    )


def dims_of(args: argparse.Namespace) -> dict[str, Any]:
    """The layout given on the command line, as create_gangs and MeshTopology take it."""
    return {
        "pp": args.pp,
        "dp_replicate": args.dp_replicate,
        "dp_shard": args.dp_shard,
        "cp": args.cp,
        "tp": args.tp,
        "ep": args.ep,
        "etp": args.etp,
        "order": args.order,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gangmesh",
        description="Plan parallel layouts and check that a cluster gets them.",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    plan = commands.add_parser(
        "plan",
        help="print the gangs of a layout, computed without processes",
        description="Print every gang of a layout (table, JSON or SVG) without processes.",
    )
    plan.add_argument("--world-size", type=int, required=True, help="number of processes")
    plan.add_argument("--ranks-per-node", type=int, help="processes per node, for locality")
    _add_dim_arguments(plan)
    plan.add_argument("--rank", type=int, help="also show the gangs of this rank")
    plan.add_argument("--format", choices=("table", "json", "svg"), default="table")
    plan.add_argument("--output", help="write to this file instead of standard output")

    check = commands.add_parser(
        "check",
        help="check gang layouts and collectives on real processes",
        description=(
            "Build the gangs on every process, check memberships against the plan, run "
            "all_reduce, all_gather, broadcast and barrier on every gang and time all_reduce. "
            "Under torchrun or SLURM each process takes part as its rank; otherwise NPROC "
            "local CPU processes are started (gloo on 127.0.0.1)."
        ),
    )
    check.add_argument("--nproc", type=int, default=4, help="local processes (default 4)")
    _add_dim_arguments(check)
    check.add_argument("--sizes", default="8,1K,64K,1M", help="all_reduce message sizes")
    check.add_argument("--iters", type=int, default=10, help="timed all_reduces per size")
    check.add_argument("--timeout", type=float, default=60.0, help="collective timeout, seconds")
    check.add_argument("--ranks-per-node", type=int, help="processes per node, for locality")
    check.add_argument("--json", help="write the results to this JSON file (rank 0)")
    check.add_argument("--init-method", help=argparse.SUPPRESS)
    check.add_argument("--inject-exit-rank", type=int, help=argparse.SUPPRESS)
    return parser


def run_plan(args: argparse.Namespace) -> int:
    plan = MeshTopology(args.world_size, **dims_of(args))
    if args.rank is not None:
        plan.coordinate(args.rank)
    if args.format == "json":
        text = plan_json(plan, ranks_per_node=args.ranks_per_node, rank=args.rank)
    elif args.format == "svg":
        text = plan_svg(plan, ranks_per_node=args.ranks_per_node)
    else:
        text = plan_table(plan, ranks_per_node=args.ranks_per_node, rank=args.rank)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(text)
    else:
        sys.stdout.write(text)
    return 0


def run_check(args: argparse.Namespace, argv: list[str]) -> int:
    """Launch local workers, or take part as this rank of a distributed job."""
    from gangmesh.check_command import check_as_rank, check_locally

    if args.iters < 1 or args.timeout <= 0:
        raise ValueError(
            f"--iters and --timeout: expected positive values, got {args.iters}, {args.timeout}"
        )
    if args.init_method:
        return check_as_rank(args, dims_of(args))
    env = read_launch_environment()
    if env is not None and env.world_size > 1:
        return check_as_rank(args, dims_of(args))
    return check_locally(args, dims_of(args), argv)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.ranks_per_node is not None and args.ranks_per_node < 1:
        parser.exit(USAGE_ERROR, f"gangmesh {args.command}: error: --ranks-per-node must be >= 1\n")
    try:
        if args.command == "check":
            return run_check(args, sys.argv[1:] if argv is None else list(argv))
        return run_plan(args)
    except ValueError as ex:
        sys.stderr.write(f"gangmesh {args.command}: error: {ex}\n")
        return USAGE_ERROR


if __name__ == "__main__":
    sys.exit(main())
