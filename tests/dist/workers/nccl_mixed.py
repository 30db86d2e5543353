"""A default group started by the user with a mixed backend ("cpu:gloo,cuda:nccl"), then
wrapped: the root gang runs on the CUDA leg, on the device torch bound the group to; a
user's mesh on "cuda" wrapped with Gangs.from_mesh takes the same device."""

import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import gangmesh as gm
from tests.dist.workers.common import write_results

device = torch.device("cuda", 0)
dist.init_process_group("cpu:gloo,cuda:nccl", device_id=device)
gang = gm.setup_root_gang()
x = torch.ones(2, device=gang.device)
gang.all_reduce(x, gm.ReduceOperation.SUM)
mesh = init_device_mesh("cuda", (1,), mesh_dim_names=("dp_shard",))
wrapped = gm.Gangs.from_mesh(mesh)
results = {
    "device": str(gang.device),
    "sum": x.tolist(),
    "from_mesh_device": str(wrapped.root.device),
}
wrapped.close()
gang.close()
dist.destroy_process_group()
write_results(int(os.environ.get("RANK", "0")), results)
