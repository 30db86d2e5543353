"""Gangs from one DeviceMesh on 8 gloo processes; memberships, collectives, timeouts to JSON."""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from common import write_results

import gangmesh as gm
from gangmesh.gang import group_timeout

TIMEOUT = timedelta(seconds=77)
LAYOUTS = {
    "pp2_rep2_tp2": {"pp": 2, "dp_replicate": 2, "tp": 2},
    "cp2_tp2": {"cp": 2, "tp": 2},
}


def describe(gangs: gm.Gangs, me: int) -> dict[str, object]:
    out: dict[str, object] = {}
    for name, gang in [("root", gangs.root), *gangs.items()]:
        entry: dict[str, object] = {"rank": gang.rank, "size": gang.size}
        if gang.supports_process_group:
            pg = gang.as_process_group()
            entry["members"] = dist.get_process_group_ranks(pg)
            entry["timeout"] = (group_timeout(pg, gang.device) or timedelta(0)).total_seconds()
        t = torch.tensor([float(me)])
        gang.all_reduce(t, gm.ReduceOperation.SUM)
        entry["sum_of_global_ranks"] = t.item()
        b = torch.tensor([float(me)])
        gang.broadcast(b, source_rank=gang.size - 1)
        entry["broadcast_from_last"] = b.item()
        out[name] = entry
    return out


def main() -> None:
    root = gm.setup_root_gang(timeout=timedelta(seconds=60))
    me = root.rank
    results: dict[str, object] = {}
    for label, dims in LAYOUTS.items():
        gangs = gm.create_gangs(root, timeout=TIMEOUT, **dims)
        entry = describe(gangs, me)
        assert gangs.mesh is not None
        entry["mesh_shape"] = list(gangs.mesh.shape)
        if dims.get("cp", 1) > 1:
            flat = gangs.mesh["dp_shard_cp"].get_group()
            entry["dp_shard_cp"] = {
                "members": dist.get_process_group_ranks(flat),
                "timeout": (group_timeout(flat, root.device) or timedelta(0)).total_seconds(),
            }
        sub = gangs.tp.create_gang([1]) if gangs.tp.size > 1 else None
        if sub is not None:
            sub_timeout = group_timeout(sub.as_process_group(), root.device) or timedelta(0)
            entry["tp_sub_timeout"] = sub_timeout.total_seconds()
        results[label] = entry
    parallel = gm.create_parallel_gangs(root, tp_size=2)
    results["parallel"] = describe(parallel, me)
    hsdp = gm.create_fsdp_gangs(parallel, intra_node_size=2)
    results["hsdp"] = describe(hsdp, me)
    results["fsdp"] = describe(gm.create_fsdp_gangs(parallel), me)
    write_results(me, results)


main()
