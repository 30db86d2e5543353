"""``gangmesh plan --part NAME=SIZE[:DIM=SIZE,...]``: the plan of every part of a job that
runs several models, each part a run of consecutive global ranks with its own layout.

Every part's gangs are shown in global ranks; the table, the JSON and the picture are
those of one plan (:mod:`gangmesh.tools.render`, :mod:`gangmesh.tools.svg`) per part.
This module needs numpy only.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from gangmesh.plan.cluster import check_ranks_per_node
from gangmesh.plan.dim_keywords import closest
from gangmesh.plan.dims import SIZE_NAMES
from gangmesh.plan.layout import Layout
from gangmesh.plan.locality import LocalityFinding
from gangmesh.plan.multipart import MultiPartPlan
from gangmesh.plan.parts import PartsPlan, check_part_name, span_text
from gangmesh.plan.topology import MeshTopology
from gangmesh.tools.failure import Failure
from gangmesh.tools.parts_svg import parts_svg
from gangmesh.tools.render import plan_document, plan_table

SPEC = "NAME=SIZE[:DIM=SIZE,...]"
"""How ``--part`` is written."""

_ORDER = "order"
_EXPERT = "expert"
_KEYS: tuple[str, ...] = (*SIZE_NAMES, _ORDER, _EXPERT)
"""What a part's spec may set after the colon: each size, the dense order, and whether the
part asks for the expert view at ep = etp = 1 (``expert=1``, as ``--expert``)."""
_FLAGS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


def parse_part(spec: str, option: str = "--part") -> tuple[str, int, Layout]:
    """The name, size and layout of one ``--part`` value.

    >>> parse_part("rollout=4:tp=2,dp_replicate=2")
    ('rollout', 4, Layout(pp=1, dp_replicate=2, dp_shard=-1, cp=1, tp=2, ep=1, etp=1))

    :param spec: ``NAME=SIZE[:DIM=SIZE,...]``; SIZE -1 takes the ranks the other parts
        leave; ``order=`` takes the dense order (comma-separated or Megatron-Core's);
        ``expert=1`` asks for the expert view.
    :param option: the option that gave it, named in errors (``--job`` names a job).
    :raises Failure: a spec that is not so written, names a dimension that does not exist
        or gives a layout that is not one (naming the spec).
    """
    head, colon, rest = spec.partition(":")
    name, equals, size_text = head.partition("=")
    if not equals or not name:
        raise Failure(f"{option} {spec}: expected {SPEC}, got no NAME=SIZE")
    try:
        check_part_name(name, f"{option} {spec}")
    except ValueError as ex:
        raise Failure(str(ex)) from ex
    size = _int(f"{option} {spec}", "SIZE", size_text)
    if size == 0 or size < -1:
        raise Failure(f"{option} {spec}: expected SIZE to be a positive int or -1, got {size}")
    keywords: dict[str, Any] = {}
    for item in _items(rest) if colon else []:
        key, equals, value = item.partition("=")
        if not equals or not key or not value:
            raise Failure(f"{option} {spec}: expected DIM=SIZE after the colon, got {item!r}")
        if key not in _KEYS:
            guess = closest(key, list(_KEYS))
            hint = f"; did you mean {guess}=?" if guess else ""
            known = ", ".join(_KEYS)
            raise Failure(
                f"{option} {spec}: unknown dimension {key}; expected one of {known}{hint}"
            )
        if key in keywords:
            raise Failure(f"{option} {spec}: expected {key} once, got it twice")
        if key == _EXPERT:
            if value.lower() not in _FLAGS:
                raise Failure(f"{option} {spec}: expected expert=1 or expert=0, got {value!r}")
            keywords[key] = _FLAGS[value.lower()]
        else:
            keywords[key] = value if key == _ORDER else _int(f"{option} {spec}", key, value)
    try:
        return name, size, Layout(**keywords)
    except ValueError as ex:
        raise Failure(f"{option} {spec}: {ex}") from ex


def _items(text: str) -> list[str]:
    """``DIM=SIZE`` items of a spec; an item without ``=`` continues the one before (the
    names of a comma-separated order)."""
    items: list[str] = []
    for piece in text.split(","):
        if items and "=" not in piece and items[-1].startswith(f"{_ORDER}="):
            items[-1] += f",{piece}"
        else:
            items.append(piece)
    return items


def _int(given: str, what: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise Failure(f"{given}: expected {what} to be an int, got {text!r}") from None


def parts_of(
    args: argparse.Namespace, world_option: str = "--world-size"
) -> tuple[MultiPartPlan, dict[str, str]]:
    """The plan of every part given with ``--part``, and each part's spec by name.

    :param args: the command line; ``args.world_size`` is the job's size, if given.
    :param world_option: the option that gave it, named in errors.
    :raises Failure: a bad spec, a part named twice, a size option given beside ``--part``,
        or sizes that do not add up to ``world_option``.
    """
    refused = [*getattr(args, "given_sizes", ())]
    refused += ["--order"] if args.order is not None else []
    refused += ["--expert"] if args.expert else []
    if refused:
        raise Failure(
            f"{refused[0]}: not with --part; give each part its sizes in its spec "
            f"({SPEC}, e.g. --part trainer=4:tp=2)"
        )
    parsed = [parse_part(spec) for spec in args.part]
    specs: dict[str, str] = {}
    for (name, _, _), spec in zip(parsed, args.part, strict=True):
        if name in specs:
            raise Failure(f"--part {spec}: part {name} is named twice (--part {specs[name]})")
        specs[name] = spec
    sizes = [(name, size) for name, size, _ in parsed]
    known = sum(size for _, size in sizes if size != -1)
    inferred = [specs[name] for name, size in sizes if size == -1]
    if inferred and args.world_size is None:
        raise Failure(
            f"--part {inferred[0]}: a SIZE of -1 is inferred from {world_option}; give it"
        )
    if not inferred and args.world_size is not None and args.world_size != known:
        added = " + ".join(f"{name}={size}" for name, size in sizes)
        raise Failure(
            f"{world_option}: expected the sum of the --part sizes, {added} = {known}, "
            f"got {args.world_size}"
        )
    try:
        parts = PartsPlan(known if args.world_size is None else args.world_size, sizes)
    except ValueError as ex:
        text = str(ex).removeprefix("sizes: ").replace("world_size", world_option)
        raise Failure(f"--part: {text}") from ex
    layouts = {name: layout for name, _, layout in parsed}
    for name in parts.names:
        try:
            MeshTopology.from_layout(parts.size(name), layouts[name])
        except ValueError as ex:
            text = str(ex).replace("world_size", "the part's size")
            raise Failure(f"--part {specs[name]}: {text}") from ex
    return MultiPartPlan(parts, layouts), specs


def check_cluster_options(args: argparse.Namespace) -> bool:
    """Whether ``--hosts-per-domain`` (and ``--domains-per-rack``) are given, each with
    what it needs.

    :raises Failure: domains without nodes, racks without domains, or a size below 1.
    """
    if args.hosts_per_domain is None and args.domains_per_rack is None:
        return False
    if args.ranks_per_node is None:
        raise Failure("--hosts-per-domain: domains hold nodes, which needs --ranks-per-node")
    if args.domains_per_rack is not None and args.hosts_per_domain is None:
        raise Failure("--domains-per-rack: racks hold domains, which needs --hosts-per-domain")
    for flag, value in (("--hosts-per-domain", args.hosts_per_domain),
                        ("--domains-per-rack", args.domains_per_rack)):  # fmt: skip
        if value is not None and value < 1:
            raise Failure(f"{flag}: expected an int >= 1, got {value}")
    return True


def parts_output(args: argparse.Namespace) -> tuple[str, list[str]]:
    """The text ``gangmesh plan --part ...`` writes, and the findings to fix (labels).

    :raises Failure: as :func:`parts_of` does.
    :raises ValueError: ``--rank`` or ``--ranks-per-node`` that does not fit the world.
    """
    plan, _ = parts_of(args)
    check_cluster_options(args)
    parts = plan.parts
    holder = None if args.rank is None else parts.part_of(args.rank)
    per_node = args.ranks_per_node
    findings: dict[str, list[LocalityFinding]] = {}
    if per_node is not None:
        check_ranks_per_node(parts.world_size, per_node)
        findings = plan.check_locality(
            per_node,
            hosts_per_domain=args.hosts_per_domain,
            domains_per_rack=args.domains_per_rack,
        )
    to_fix = [f"{name} {f.dim}" for name, found in findings.items() for f in found if f.avoidable]
    shown = [
        (name, parts.offset(name), args.rank if name == holder else None) for name in parts.names
    ]
    if args.format == "json":
        content = args.json_content or "all"
        document: dict[str, Any] = {"world_size": parts.world_size, "parts": []}
        if per_node is not None:
            document["ranks_per_node"] = per_node
        if args.rank is not None:
            document["rank"] = {"rank": args.rank, "part": holder}
        for name, offset, rank in shown:
            one = plan_document(
                plan.plan(name),
                ranks_per_node=per_node,
                rank=rank,
                content=content,
                offset=offset,
                findings=findings.get(name),
            )
            document["parts"].append(
                {"name": name, "offset": offset, "size": parts.size(name), "plan": one}
            )
        return json.dumps(document) + "\n", to_fix
    if args.format == "svg":
        return parts_svg(plan, ranks_per_node=per_node, rank=args.rank, findings=findings), to_fix
    tables = []
    for name, offset, rank in shown:
        heading = f"part {name}: {span_text(parts.span(name))} of {parts.world_size}"
        table = plan_table(plan.plan(name), ranks_per_node=per_node, rank=rank, offset=offset,
                           findings=findings.get(name))  # fmt: skip
        tables.append(f"{heading}\n{table}")
    return "\n".join(tables), to_fix
