"""HSDP x TP over 8 gloo processes whose hosts GANGMESH_HOST names, with or without placement:
where each tp gang's members run, what the locality check says, and training against one
process. argv: out_dir, then "placed" or "numbered", then "hsdp" (2 replicas x 2 shards x
tp 2) or "fsdp" (4 shards x tp 2)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from common import write_results
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import gangmesh as gm
from gangmesh.plan.placement import this_site

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "docs" / "examples"))
from toy_model import check_sharded, compare, make_model, reference_losses, train_data_parallel


def disagreements(gangs: gm.Gangs) -> list[str]:
    """Mesh dimensions where this process's coordinate in the mesh tensor (what DTensor
    shards by) differs from its rank in the dimension's group (what collectives order by),
    or from its rank in the gang of the same name."""
    found = []
    for name, mesh in gangs.meshes.items():
        coordinate = mesh.get_coordinate()
        assert coordinate is not None
        for index, dim in enumerate(mesh.mesh_dim_names or ()):
            ranks = {coordinate[index], mesh.get_local_rank(dim), gangs[dim].rank}
            if len(ranks) > 1:
                found.append(f"{name}.{dim}")
    return found


def main() -> None:
    placed = sys.argv[2] == "placed"
    replicas = 2 if sys.argv[3] == "hsdp" else 1
    root = gm.setup_root_gang()
    gangs = gm.create_gangs(root, dp_replicate=replicas, dp_shard=-1, tp=2, placement=placed)
    sites = gm.all_gather_objects(root, this_site())
    # The hosts of the tp gang's members, gathered over the tp gang's own group.
    host_ids = {site.host: index for index, site in enumerate(dict.fromkeys(sites))}
    mine = torch.tensor([host_ids[this_site().host]], dtype=torch.int64)
    tp_hosts = torch.empty(gangs.tp.size, dtype=torch.int64)
    gangs.tp.all_gather(tp_hosts, mine)
    findings = gangs.plan.check_locality(gm.Cluster.of_sites(sites))

    model = make_model(root.device)
    mesh = gangs.meshes["dp_shard_cp"]
    plan = {"up": ColwiseParallel(), "down": RowwiseParallel()}
    for block in model.blocks:
        parallelize_module(block, mesh["tp"], plan)
        fully_shard(block, mesh=mesh["dp_replicate", "dp_shard_cp"])
    fully_shard(model, mesh=mesh["dp_replicate", "dp_shard_cp"])
    check_sharded(model.blocks[0].up.weight, gangs.tp.size * gangs.sdp.size, root.rank)
    losses = train_data_parallel(model, gangs.dp)
    reference = reference_losses(root.device)
    compare(losses, reference, root.rank)  # exits 1 where a loss is off
    write_results(
        root.rank,
        {
            "host": this_site().host,
            "placement": list(gangs.plan.placement),
            "tp_members": gangs.plan.group_of(root.rank, "tp"),
            "tp_hosts": tp_hosts.tolist(),
            "findings": [[f.dim, f.level, f.count] for f in findings],
            "mesh_tp_rank": mesh.get_local_rank("tp"),
            "tp_rank": gangs.tp.rank,
            "mesh_disagreements": disagreements(gangs),
            "losses": losses,
            "reference": reference,
        },
    )
    gangs.close()
    root.close()


if __name__ == "__main__":
    main()
