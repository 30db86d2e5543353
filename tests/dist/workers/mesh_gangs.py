"""Gangs of several layouts on 8 gloo processes: memberships, collectives, timeouts and
communicators of every gang, written as JSON per rank."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from common import write_results

import gangmesh as gm
import gangmesh.runtime._c10d
from gangmesh.assembly.mesh_build import BUILT_NAMES
from gangmesh.runtime._c10d import group_timeout

TIMEOUT = timedelta(seconds=77)
LAYOUTS: dict[str, dict[str, object]] = {
    "tp2": {"tp": 2},
    "hsdp_tp2": {"dp_replicate": 2, "dp_shard": 2, "tp": 2, "expert": True},
    "pp2_rep2_tp2": {"pp": 2, "dp_replicate": 2, "tp": 2},
    "cp2_tp2": {"cp": 2, "tp": 2, "expert": True},
    "ep4": {"dp_shard": 4, "tp": 2, "ep": 4},
    "ep2_etp2": {"dp_replicate": 2, "dp_shard": 2, "tp": 2, "ep": 2, "etp": 2},
    "ep1_etp2": {"dp_replicate": 2, "dp_shard": 2, "tp": 2, "ep": 1, "etp": 2},
    "tp_outermost": {"tp": 2, "order": "tp,pp,dp_replicate,dp_shard,cp"},
}


def describe(gangs: gm.Gangs, me: int) -> dict[str, object]:
    unbuilt = [name for name in ("efsdp", "edp") if name not in list(gangs)]
    built = [name for name in BUILT_NAMES if name not in unbuilt]
    out: dict[str, object] = {"unbuilt": unbuilt}
    for name in ("root", *built):
        gang = gangs[name]
        entry: dict[str, object] = {"rank": gang.rank, "size": gang.size}
        if isinstance(gang, gm.ProcessGroupGang):
            entry["members"] = gang.global_ranks
            entry["desc"] = getattr(gang.as_process_group(), "group_desc", None)
            entry["timeout"] = (
                group_timeout(gang.as_process_group(), gang.device) or timedelta(0)
            ).total_seconds()
        t = torch.tensor([float(me)])
        gang.all_reduce(t, gm.ReduceOperation.SUM)
        entry["sum_of_global_ranks"] = t.item()
        b = torch.tensor([float(me)])
        gang.broadcast(b, source_rank=gang.size - 1)
        entry["broadcast_from_last"] = b.item()
        out[name] = entry
    for name in (n for n in ("ep", "efsdp", "etp") if n in built):
        gang = gangs[name]
        # Rank d of the gang gets d + 1 rows from every process, each row holding the sender.
        sends = [d + 1 for d in range(gang.size)]
        received = torch.empty(gang.size * (gang.rank + 1))
        gang.all_to_all(
            received, torch.full((sum(sends),), float(me)), [gang.rank + 1] * gang.size, sends
        )
        out[name]["all_to_all"] = received.tolist()
    out["communicators"] = [
        {"ranks": list(info.ranks), "gangs": list(info.gangs), "created": info.created}
        for info in gangs.communicators()
    ]
    # The groups torch actually holds behind the gangs and the meshes.
    gang_list = [gangs.root, *(gangs[name] for name in built)]
    groups = [g.as_process_group() for g in gang_list if isinstance(g, gm.ProcessGroupGang)]
    sums: dict[str, float] = {}
    for mesh_name, mesh in gangs.meshes.items():
        for dim in mesh.mesh_dim_names or ():
            group = mesh.get_group(dim)
            groups.append(group)
            # Out of place into NaN, as FSDP2 reduces gradients (a size-1 group included).
            t = torch.tensor([float("nan")])
            dist.reduce_scatter_tensor(t, torch.full((group.size(),), float(me)), group=group)
            sums[f"{mesh_name}/{dim}"] = t.item()
    out["mesh_sums"] = sums
    distinct = {id(g): g for g in groups}
    out["groups"] = sorted(dist.get_process_group_ranks(g) for g in distinct.values())
    out["backends"] = sorted({dist.get_backend(g) for g in distinct.values()})
    if gangs.mesh is not None:
        out["mesh"] = {
            "names": list(gangs.mesh.mesh_dim_names or ()),
            "shape": list(gangs.mesh.shape),
        }
    if gangs.expert_mesh is not None:
        out["expert_mesh"] = {
            "names": list(gangs.expert_mesh.mesh_dim_names or ()),
            "shape": list(gangs.expert_mesh.shape),
            "shares_pp": gangs.expert_mesh.get_group("pp") is gangs.mesh.get_group("pp"),  # type: ignore[union-attr]
        }
    return out


def counted(function: Callable[..., Any], name: str, calls: dict[str, int]) -> Callable[..., Any]:
    """``function``, counting its calls in ``calls[name]``."""

    def call(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return function(*args, **kwargs)

    return call


def sub_gang(gang: gm.Gang, me: int) -> dict[str, object] | None:
    """A sub-gang of gang ranks 2 and 0 (in that order): its members and a sum over it."""
    sub = gang.create_gang([2, 0])
    if sub is None:
        return None
    t = torch.tensor([float(me)])
    sub.all_reduce(t, gm.ReduceOperation.SUM)
    return {"members": sub.global_ranks, "rank": sub.rank, "sum": t.item()}


def main() -> None:
    # "split": gangmesh makes every group as torch must where it splits the default group's
    # communicator (NCCL bound to a device): one split of the parent per dimension, entered
    # by every process of the parent. torch 2.15 splits gloo groups for real as well.
    calls = {"split_group": 0, "new_group": 0}
    for name in calls:
        setattr(dist, name, counted(getattr(dist, name), name, calls))
    if sys.argv[2:] == ["split"]:
        gangmesh.runtime._c10d.splits_new_groups = lambda backend: True
    root = gm.setup_root_gang(timeout=timedelta(seconds=60))
    me = root.rank
    results: dict[str, object] = {"calls": calls}
    for label, layout in LAYOUTS.items():
        gangs = gm.create_gangs(root, timeout=TIMEOUT, **layout)  # type: ignore[arg-type]
        results[label] = describe(gangs, me)
        gangs.close()
    parallel = gm.create_parallel_gangs(root, tp_size=2)
    results["parallel"] = describe(parallel, me)
    hsdp = gm.create_fsdp_gangs(parallel, intra_node_size=2)
    results["hsdp"] = describe(hsdp, me)
    fsdp = gm.create_fsdp_gangs(parallel)
    results["fsdp"] = describe(fsdp, me)
    results["sub_of_dp"] = sub_gang(parallel.dp, me)
    results["sub_of_root"] = sub_gang(root, me)
    write_results(me, results)


main()
