# init_device_mesh + get_group by hand
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
shard_group = mesh.get_group("shard")
replicate_group = mesh.get_group("replicate")

t = torch.tensor(float(dist.get_rank()))
dist.all_reduce(t, group=shard_group)
dist.broadcast(t, group=replicate_group, group_src=1)  # group_src, not src: a global rank
print(f"rank {dist.get_rank()}: {t.item()}")
dist.destroy_process_group()
