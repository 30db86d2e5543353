# gangmesh
import torch

import gangmesh as gm

root = gm.setup_root_gang()
gangs = gm.create_gangs(root, dp_replicate=2, dp_shard=2)


t = torch.tensor(float(root.rank))
gangs.sdp.all_reduce(t, gm.ReduceOperation.SUM)
gangs.rdp.broadcast(t, source_rank=1)  # a rank inside the gang, on every gang
print(f"rank {root.rank}: {t.item()}")
