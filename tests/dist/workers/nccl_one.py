"""One process on one GPU through gangmesh's NCCL path: every collective of the root gang,
NCCL's options (timeout, high-priority streams), the default group bound to the device, a
split with another timeout that leaves the parent's alone, a mesh on "cuda", FSDP2 over it,
and a sub-gang made with create_gang."""

import os
from datetime import timedelta

import torch
from torch import nn
from torch.distributed.fsdp import fully_shard

import gangmesh as gm
from tests.dist.workers.common import write_results

device = torch.device("cuda", 0)
gang = gm.setup_root_gang(device, timeout=timedelta(seconds=60), high_priority=True)
pg = gang.as_process_group()
options = pg._get_backend(device).options
results: dict[str, object] = {
    "backend": gm.ProcessGroupGang.__name__ if isinstance(gang, gm.ProcessGroupGang) else "",
    "nccl": torch.distributed.get_backend(pg),
    "high_priority": bool(options.is_high_priority_stream),
    "timeout_s": options._timeout.total_seconds(),
    "bound": str(getattr(torch.distributed.group.WORLD, "bound_device_id", None)),
}

x = torch.arange(4.0, device=device)
gang.all_reduce(x, gm.ReduceOperation.SUM)
gathered = torch.empty(4, device=device)
gang.all_gather(gathered, x)
scattered = torch.empty(4, device=device)
gang.reduce_scatter(scattered, x, gm.ReduceOperation.SUM)
swapped = torch.empty(4, device=device)
gang.all_to_all(swapped, x, output_split_sizes=[4], input_split_sizes=[4])
gang.broadcast(x, source_rank=0)
gang.barrier()
results["collectives"] = [t.tolist() for t in (x, gathered, scattered, swapped)]
try:
    gang.all_reduce(torch.ones(2), gm.ReduceOperation.SUM)
    results["cpu_tensor"] = "accepted"
except ValueError as ex:
    results["cpu_tensor"] = str(ex)

shorter = gm.create_gangs(gang, timeout=timedelta(seconds=30))  # a split where torch splits
results["root_timeout_after_split_s"] = pg._get_backend(device).options._timeout.total_seconds()
shorter.close()

gangs = gm.create_gangs(gang)
assert gangs.mesh is not None
results["mesh_device"] = gangs.mesh.device_type
torch.manual_seed(0)
reference = nn.Linear(8, 4).to(device)
model = nn.Linear(8, 4).to(device)
model.load_state_dict(reference.state_dict())
fully_shard(model, mesh=gangs.mesh["dp_shard"])
batch = torch.randn(16, 8, device=device)
model(batch).square().sum().backward()
reference(batch).square().sum().backward()
results["fsdp_grad_error"] = max(
    (p.grad.full_tensor() - r.grad).abs().max().item()  # type: ignore[union-attr]
    for p, r in zip(model.parameters(), reference.parameters(), strict=True)
)
sub = gang.create_gang([0])
results["sub_gang"] = type(sub).__name__
if sub is not None:
    sub.close()
gangs.close()
gang.close()
results["torch"] = torch.__version__
write_results(int(os.environ.get("RANK", "0")), results)
