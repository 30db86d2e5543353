"""Who owns what, on 4 gloo processes: wrapped meshes, closed gangs, refined gangs; to JSON."""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from common import write_results
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import gangmesh as gm


def summed(group: dist.ProcessGroup, value: float) -> float:
    t = torch.tensor([value])
    dist.all_reduce(t, group=group)
    return t.item()


def hsdp_tp_grads_match(gangs: gm.Gangs) -> bool:
    """FSDP2 (HSDP) and tensor parallelism on slices of meshes["dp_shard_cp"] give the
    gradients of one process (every process sees the same batch)."""
    torch.manual_seed(1)
    alone = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))
    model.load_state_dict(alone.state_dict())
    mesh = gangs.meshes["dp_shard_cp"]
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "1": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp_replicate", "dp_shard_cp"])
    batch = torch.arange(12.0).reshape(3, 4) / 10
    model(batch).square().sum().backward()
    alone(batch).square().sum().backward()
    return all(
        torch.allclose(p.grad.full_tensor(), q.grad, rtol=1e-5, atol=1e-6)  # type: ignore[union-attr]
        for p, q in zip(model.parameters(), alone.parameters(), strict=True)
    )


def main() -> None:
    root = gm.setup_root_gang(timeout=timedelta(seconds=60))
    me = root.rank
    out: dict[str, object] = {}

    # A mesh the user built, wrapped and closed, keeps working.
    mine = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp_shard", "tp"))
    wrapped = gm.Gangs.from_mesh(mine)
    out["wrapped_created"] = [info.created for info in wrapped.communicators()]
    out["wrapped_loss_sum"] = summed(wrapped.meshes["loss"].get_group("loss"), me)
    out["wrapped_tp_is_users"] = wrapped.meshes["fsdp"].get_group("tp") is mine.get_group("tp")
    wrapped.close()
    out["user_tp_after_close"] = summed(mine.get_group("tp"), me)
    out["user_dp_shard_after_close"] = summed(mine.get_group("dp_shard"), me)

    # Gangs closed: the default group stays, and a mesh can be made after.
    gm.create_gangs(root, tp=2).close()
    out["initialised_after_close"] = dist.is_initialized()
    out["mesh_after_close"] = summed(init_device_mesh("cpu", (4,)).get_group(), 1.0)

    # A mesh gangmesh handed out, handed back: the gangs' plan and groups; refused once closed.
    gangs = gm.create_gangs(root, dp_shard=2, tp=2)
    mesh, tp = gangs.meshes["dp_shard_cp"], gangs.tp.as_process_group()
    again = gm.Gangs.from_mesh(mesh)
    out["handed_back"] = [
        again.plan.sizes() == gangs.plan.sizes(),
        again.tp.as_process_group() is tp,
    ]
    again.close()
    gangs.close()
    for name, call in (("closed_mesh", lambda: gm.Gangs.from_mesh(mesh)),
                       ("closed_group", lambda: gm.ProcessGroupGang(tp, torch.device("cpu")))):  # fmt: skip
        try:
            call()
            out[name] = None
        except ValueError as ex:
            out[name] = str(ex)

    # The fairseq2 flow: the first gangs refined, then closed; the second keeps working.
    first = gm.create_parallel_gangs(root, tp_size=2)
    second = gm.create_fsdp_gangs(first, intra_node_size=1)  # HSDP: rdp of 2, sdp of 1
    out["shared_with_first"] = sorted(
        name for name, gang in second.items()
        if gang.size > 1 and gang.as_process_group() is first[name].as_process_group()
    )  # fmt: skip
    first.close()
    out["second_after_first_closed"] = {
        name: summed(gang.as_process_group(), me) for name, gang in [("root", root), *second.items()] if gang.size > 1
    }  # fmt: skip
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))
    assert second.mesh is not None
    fully_shard(model, mesh=second.mesh["dp_replicate", "dp_shard"])
    model(torch.ones(3, 4)).sum().backward()
    grad = model[0].weight.grad
    out["fsdp_grad_sum"] = float(grad.full_tensor().sum())  # type: ignore[union-attr]
    out["hsdp_tp_grads_match"] = hsdp_tp_grads_match(second)
    out["communicators"] = [list(info.ranks) for info in second.communicators()]

    write_results(me, out)


main()
