"""The layout record: one JSON document per job that maps torch's process groups to gangs.

NCCL logs, Flight Recorder dumps and torch's timeout messages name a process group by its
name (``group_name``, torch's "PG GUID") and description (``group_desc``). The record
lists, for every gang, every group with its members, that name, description, backend and
timeout, and for every rank its site (host, NVLink domain, rack: see
:func:`gangmesh.plan.placement.this_site`), so that a name read in a dump leads to the gang.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Protocol

import torch.distributed as dist

from gangmesh.plan.dims import GANG_NAMES, ROOT
from gangmesh.plan.placement import this_site
from gangmesh.plan.topology import MeshTopology
from gangmesh.runtime.gang import Gang
from gangmesh.runtime.ops import all_gather_objects
from gangmesh.runtime.process_group_gang import ProcessGroupGang

RECORD_VERSION = 1
"""The version of the record's format, written into it as ``"version"``."""


class RecordedGangs(Protocol):
    """What the record reads of a :class:`~gangmesh.Gangs`: the root gang, the plan, and
    the gang of each name."""

    @property
    def root(self) -> Gang:
        """The gang of every process."""

    @property
    def plan(self) -> MeshTopology:
        """The layout the gangs were built from."""

    def __getitem__(self, name: str) -> Gang:
        """The gang of a dimension or alias."""


def layout_record(gangs: RecordedGangs) -> dict[str, Any]:
    """The job's layout record, the same on every process (JSON-ready: str keys only).

    Every process of the root gang must call it: it gathers each process's site and groups.
    ``{"version", "world_size", "sizes", "order", "ranks": [{"rank", "host", "domain",
    "rack"}], "gangs":
    {name: [{"members", "group_name", "description", "backend", "timeout_s"}]},
    "group_names": {group_name: {"gangs", "members", "description"}}}``; a gang of size 1
    has no group: its name, description and backend are None. ``world_size`` is the root
    gang's size (a part's, for gangs built on ``parts.root``); ``ranks`` lists the root's
    processes by root rank, each with its global rank, and ``members`` are global ranks.

    :param gangs: the gangs of this process.
    :raises gangmesh.GangError: a peer died or did not answer while gathering.
    """
    rank = dist.get_rank() if gangs.root.supports_process_group else gangs.root.rank
    mine = {"rank": rank, "site": dataclasses.asdict(this_site()), "groups": _groups_of(gangs)}
    everyone = all_gather_objects(gangs.root, mine)
    found: dict[str, dict[tuple[int, ...], dict[str, Any]]] = {}
    for process in everyone:
        for name, group in process["groups"].items():
            found.setdefault(name, {}).setdefault(tuple(group["members"]), group)
    by_name: dict[str, dict[str, Any]] = {}
    for name, groups in found.items():
        for group in groups.values():
            if group["group_name"] is not None:
                entry = by_name.setdefault(
                    group["group_name"],
                    {"gangs": [], "members": group["members"], "description": group["description"]},
                )
                entry["gangs"].append(name)
    return {
        "version": RECORD_VERSION,
        "world_size": gangs.plan.world_size,
        "sizes": gangs.plan.sizes(),
        "order": list(gangs.plan.order),
        "ranks": [{"rank": p["rank"], **p["site"]} for p in everyone],
        "gangs": {
            name: sorted(groups.values(), key=lambda g: g["members"])
            for name, groups in found.items()
        },
        "group_names": by_name,
    }


def write_layout_record(record: dict[str, Any], path: str | Path) -> None:
    """Write ``record`` (from :func:`layout_record`) as JSON to ``path``.

    :param record: a layout record.
    :param path: the file to write.
    :raises OSError: the file cannot be written.
    """
    Path(path).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def read_layout_record(path: str | Path) -> dict[str, Any]:
    """A layout record written by
    :func:`~gangmesh.assembly.record.write_layout_record`; equal to what was written.

    :param path: the file to read.
    :raises OSError: the file cannot be read.
    :raises ValueError: it is not a layout record of a version this gangmesh reads.
    """
    record = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(record, dict) or record.get("version") != RECORD_VERSION:
        raise ValueError(f"path: expected a gangmesh layout record of version 1, got {path}")
    return record


def _groups_of(gangs: RecordedGangs) -> dict[str, dict[str, Any]]:
    """This process's group of each gang, root first."""
    rank = gangs.root.rank
    groups = {}
    for name in (ROOT, *GANG_NAMES):
        gang = gangs[name]
        entry: dict[str, Any] = {
            "members": [rank],
            "group_name": None,
            "description": None,
            "backend": None,
            "timeout_s": None,
        }
        # global_ranks (in gang order) and timeout are kept by a ProcessGroupGang only
        if isinstance(gang, ProcessGroupGang) and gang.size > 1:
            group = gang.as_process_group()
            entry["members"] = gang.global_ranks
            entry["group_name"] = group.group_name
            entry["description"] = getattr(group, "group_desc", None)  # torch >= 2.9.1 has it
            entry["backend"] = str(dist.get_backend(group))
            entry["timeout_s"] = gang.timeout.total_seconds()
        groups[name] = entry
    return groups
