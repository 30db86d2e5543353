"""Parts of a job on 8 gloo processes: a trainer on ranks 0-3 and a rollout part on 4-7, each
with its own gangs; a bridge; ownership; bad input and disagreement; to JSON."""

from __future__ import annotations

import time
from datetime import timedelta

import torch
from common import write_results
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import gangmesh as gm

SUM = gm.ReduceOperation.SUM


def summed(gang: gm.Gang, value: float) -> float:
    t = torch.tensor([value])
    gang.all_reduce(t, SUM)
    return t.item()


def refused(call: object) -> str:
    """The message of the ValueError a call raises, with the seconds it took."""
    start = time.monotonic()
    try:
        call()  # type: ignore[operator]
    except ValueError as ex:
        return f"{time.monotonic() - start:.1f} s: {ex}"
    return "not refused"


def fsdp_tp_step(gangs: gm.Gangs) -> float:
    """One FSDP2 x TP backward on the part's meshes: the sum of the full first gradient."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))
    mesh = gangs.meshes["dp_shard_cp"]
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "1": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp_replicate", "dp_shard_cp"])
    model(torch.ones(3, 4)).square().sum().backward()
    return float(model[0].weight.grad.full_tensor().sum())  # type: ignore[union-attr]


def main() -> None:
    root = gm.setup_root_gang(timeout=timedelta(seconds=60))
    me = root.rank
    out: dict[str, object] = {}

    # Bad input: refused on every process before any of them waits on another.
    out["bad_sizes"] = refused(lambda: gm.create_parts(root, trainer=3, rollout=4))
    out["bad_name"] = refused(lambda: gm.create_parts(root, trainer=4, tp=4))
    # One process asking for other parts: every process names it.
    asked = {"trainer": 2, "rollout": 6} if me == 7 else {"trainer": 4, "rollout": 4}
    out["disagreement"] = refused(lambda: gm.create_parts(root, **asked))

    parts = gm.create_parts(root, trainer=4, rollout=-1)
    out["part"] = parts.name
    out["part_rank"] = [parts.root.rank, parts.root.size]
    out["ranks"] = {name: parts.ranks(name) for name in ("trainer", "rollout")}
    gangs = gm.create_gangs(parts.root, dp_shard=2, tp=2)
    out["groups"] = {name: gangs[name].global_ranks for name in ("tp", "sdp", "dp")}  # type: ignore[attr-defined]
    out["sums"] = {name: summed(gangs[name], me) for name in ("tp", "sdp")}
    out["communicators"] = [list(info.ranks) for info in gangs.communicators()]
    out["mesh_ranks"] = gangs.meshes["dense"].mesh.flatten().tolist()  # type: ignore[union-attr]

    out["bad_bridge"] = refused(lambda: parts.bridge(trainer=[0], rollout=[3]))
    out["part_root_as_job_root"] = refused(lambda: gm.create_parts(parts.root, a=2, b=2))
    bridge = parts.bridge(trainer=[0], rollout=[4, 5, 6, 7])
    out["bridge"] = None if bridge is None else bridge.global_ranks  # type: ignore[attr-defined]
    sent = torch.tensor([42.0 if me == 0 else 0.0])
    if bridge is not None:
        bridge.broadcast(sent, bridge.global_ranks.index(0))  # type: ignore[attr-defined]
    out["bridged"] = sent.item()

    # The rollout part closes its gangs: the trainer's gangs and meshes, and the bridge, work.
    if parts.name == "rollout":
        gangs.close()
    else:
        out["trainer_after_rollout_closed"] = summed(gangs.tp, me)
        out["fsdp_tp_grad"] = fsdp_tp_step(gangs)
    again = torch.tensor([7.0 if me == 0 else 0.0])
    if bridge is not None:
        bridge.broadcast(again, bridge.global_ranks.index(0))  # type: ignore[attr-defined]
    out["bridged_after_close"] = again.item()
    gangs.close()
    parts.close()
    out["root_after_parts_closed"] = summed(root, 1.0)
    write_results(me, out)
    root.close()


if __name__ == "__main__":
    main()
