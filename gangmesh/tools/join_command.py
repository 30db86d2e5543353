"""``gangmesh plan --job NAME=SIZE[:DIM=SIZE,...] --job ... [--push ROWSxCOLS[:DTYPE]]``: two
jobs launched apart and joined (each numbers its ranks from 0), and who sends which shard of
a weight to whom when the first pushes it to the second.

The weight is held as a column-parallel layer holds it: its rows split by tp, then each tp
shard's rows by dp_shard (FSDP2 over a tensor-parallel shard); dp_replicate holds replicas.
This module needs numpy only.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from gangmesh.plan.dims import Dim
from gangmesh.plan.join_plan import plan_record
from gangmesh.plan.push_plan import PushPlan, Route
from gangmesh.plan.shards import ITEM_SIZES, Box, TensorShards
from gangmesh.plan.topology import MeshTopology
from gangmesh.tools.failure import Failure
from gangmesh.tools.parts_command import parse_part
from gangmesh.tools.push_svg import push_svg
from gangmesh.tools.render import plan_table

PUSH = "ROWSxCOLS[:DTYPE]"
"""How ``--push`` is written."""
SPLIT = (Dim.TP.value, Dim.DP_SHARD.value)
"""The mesh dimensions that split a weight's rows, outermost first."""


def add_arguments(plan: argparse.ArgumentParser) -> None:
    """``--job`` and ``--push``, on ``gangmesh plan``'s parser."""
    plan.add_argument(
        "--job",
        action="append",
        metavar="NAME=SIZE[:DIM=SIZE,...]",
        help="a job launched apart, joined to the other --job (gangmesh.join_jobs): each numbers "
        "its ranks from 0; give two, the first pushing weights to the second",
    )
    plan.add_argument(
        "--push",
        metavar=PUSH,
        default="4096x4096:bfloat16",
        help="with --job: the weight the first job pushes to the second, its rows split by tp, "
        "then dp_shard (FSDP2) in each job",
    )


def jobs_of(args: argparse.Namespace) -> tuple[dict[str, MeshTopology], TensorShards]:
    """The two jobs' plans, by name, and the weight pushed.

    :raises Failure: not two jobs, an option of a single plan beside them, a bad spec, a job
        named twice, or a bad ``--push``.
    """
    if len(args.job) != 2:
        raise Failure(
            f"--job: expected two jobs (the first pushes to the second), got {len(args.job)}"
        )
    if args.part or args.world_size is not None:
        raise Failure("--job: not with --part or --world-size; each job's spec gives its size")
    refused = [*getattr(args, "given_sizes", ())]
    refused += [option for option, given in (
        ("--order", args.order is not None), ("--expert", args.expert),
        ("--rank", args.rank is not None), ("--ranks-per-node", args.ranks_per_node is not None),
        ("--strict", args.strict), ("--replica-groups", args.replica_groups is not None),
    ) if given]  # fmt: skip
    if refused:
        raise Failure(
            f"{refused[0]}: not with --job, which plans each job from its spec "
            f"(NAME=SIZE[:DIM=SIZE,...], e.g. --job trainer=4:tp=2)"
        )
    plans: dict[str, MeshTopology] = {}
    for spec in args.job:
        name, size, layout = parse_part(spec, "--job")
        if name in plans:
            raise Failure(f"--job {spec}: job {name} is named twice")
        if size < 1:
            raise Failure(f"--job {spec}: expected SIZE to be a positive int, got {size}")
        try:
            plans[name] = MeshTopology.from_layout(size, layout)
        except ValueError as ex:
            raise Failure(f"--job {spec}: {str(ex).replace('world_size', 'the job size')}") from ex
    return plans, _weight(args.push)


def _weight(text: str) -> TensorShards:
    """The weight ``--push`` gives, split as a column-parallel layer's."""
    shape_text, _, dtype = text.partition(":")
    sizes = shape_text.lower().split("x")
    if len(sizes) != 2 or not all(s.isdigit() and int(s) > 0 for s in sizes):
        raise Failure(f"--push: expected {PUSH} with positive ROWS and COLS, got {text!r}")
    dtype = dtype or "bfloat16"
    if dtype not in ITEM_SIZES:
        raise Failure(f"--push: expected a DTYPE of {', '.join(ITEM_SIZES)}, got {dtype!r}")
    return TensorShards((int(sizes[0]), int(sizes[1])), dtype, {0: SPLIT})


def join_output(args: argparse.Namespace) -> str:
    """The text ``gangmesh plan --job ... --job ...`` writes.

    :raises Failure: as :func:`jobs_of` does.
    """
    plans, weight = jobs_of(args)
    (sender, senders), (receiver, receivers) = plans.items()
    push = PushPlan(senders, {"weight": weight}, receivers, {"weight": weight})
    if args.format == "json":
        return json.dumps(_document(plans, push, weight)) + "\n"
    if args.format == "svg":
        return push_svg(plans, push)
    tables = [
        f"job {name}: {plan.world_size} ranks, numbered from 0\n{plan_table(plan)}"
        for name, plan in plans.items()
    ]
    return "\n".join([*tables, *push_lines(sender, receiver, push)]) + "\n"


def push_lines(sender: str, receiver: str, push: PushPlan) -> list[str]:
    """The routes of ``push`` in words, and what each sender carries."""
    weight = push.shards("weight")
    shape = "x".join(map(str, weight.shape))
    lines = [
        f"push of a {shape} {weight.dtype} weight from job {sender} to job {receiver} "
        f"(rows split by tp, then dp_shard):"
    ]
    for route in push.routes:
        lines.append(f"  {sender} {_where(push, route)} -> {receiver} {_ranks(route.receivers)}: "
                     f"{_rows(route, weight)}, {_size(push.data_bytes(route))}")  # fmt: skip
    senders = sorted({route.sender for route in push.routes})
    busiest = max(push.bytes_sent(rank) for rank in senders)
    lines.append(
        f"{len(senders)} senders, each its own shard: the busiest sends {_size(busiest)} of "
        f"{_size(push.total_bytes)}; no rank gathers"
    )
    return lines


def _where(push: PushPlan, route: Route) -> str:
    """``rank 3 (dp_shard 1, tp 1)``: a sender and its coordinate along the split."""
    plan = push.sender_plan
    coordinate = plan.coordinate(route.sender)
    shown = ", ".join(f"{dim} {coordinate[dim]}" for dim in plan.dims if plan.dims[dim] > 1)
    return f"rank {route.sender}" + (f" ({shown})" if shown else "")


def _ranks(ranks: tuple[int, ...]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


def _rows(route: Route, weight: TensorShards) -> str:
    """The rows a route carries (or the boxes, where they are not whole rows)."""
    boxes = [piece.box for piece in route.pieces]
    if all(box.size[1:] == weight.shape[1:] for box in boxes):
        return ", ".join(f"rows {b.start[0]}-{b.start[0] + b.size[0] - 1}" for b in boxes)
    return ", ".join(box.text() for box in boxes)


def _size(nbytes: int) -> str:
    """``"8 MiB"``: bytes in the largest unit that keeps a number of at least 1."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


def _document(
    plans: dict[str, MeshTopology], push: PushPlan, weight: TensorShards
) -> dict[str, Any]:
    """The JSON document: each job's plan and the routes of the push."""
    return {
        "jobs": [{"name": name, "plan": plan_record(plan)} for name, plan in plans.items()],
        "push": {
            "weight": weight.record(),
            "routes": [
                {
                    "sender": r.sender,
                    "receivers": list(r.receivers),
                    "bytes": push.data_bytes(r),
                    "pieces": [_box(p.box) for p in r.pieces],
                }
                for r in push.routes
            ],
        },
    }


def _box(box: Box) -> dict[str, list[int]]:
    return {"start": list(box.start), "size": list(box.size)}
