"""Every collective on the root gang, on sub-gangs and on mesh gangs, 4 processes; results to JSON.

Group creation is interleaved on purpose: sub-gangs made by parts of the world, then
create_gangs by all, then sub-gangs of sub-gangs, then create_gangs again.
"""

from __future__ import annotations

from datetime import timedelta
from enum import Enum

import torch
from common import write_results

import gangmesh as gm

OPS = list(gm.ReduceOperation)
CPU = torch.device("cpu")


class OtherReduceOperation(Enum):
    """Another library's reduce operations (fairseq2's, say): the same names, other values."""

    MAX = 1
    MIN = 2
    PRODUCT = 3
    MEAN = 4
    SUM = 5


def exercise(gang: gm.Gang, global_rank: int) -> dict[str, object]:
    """Run each collective with values derived from the global rank."""
    out: dict[str, object] = {"rank": gang.rank, "size": gang.size}
    for op in OPS:
        t = torch.tensor([global_rank + 1.0, -(global_rank + 1.0)])
        gang.all_reduce(t, op)
        out[f"all_reduce_{op.name}"] = t.tolist()
        t = torch.tensor([global_rank + 1.0, -(global_rank + 1.0)])
        gang.all_reduce(t, OtherReduceOperation[op.name])
        out[f"all_reduce_{op.name}_by_name"] = t.tolist()
        # reduce_scatter: element i of the input is (global rank + 1) * (i + 1).
        inp = torch.tensor([(global_rank + 1.0) * (i + 1) for i in range(2 * gang.size)])
        chunk = torch.empty(2)
        gang.reduce_scatter(chunk, inp, op)
        out[f"reduce_scatter_{op.name}"] = chunk.tolist()
    inp = torch.tensor([global_rank * 10, global_rank * 10 + 1])
    stacked = torch.empty(gang.size, 2, dtype=inp.dtype)
    gang.all_gather(stacked, inp)
    flat = torch.empty(gang.size * 2, dtype=inp.dtype)
    gang.all_gather(flat, inp)
    outs = [torch.empty(2, dtype=inp.dtype) for _ in range(gang.size)]
    gang.all_gather_to_list(outs, inp)
    out["all_gather_stacked"] = stacked.tolist()
    out["all_gather_flat"] = flat.tolist()
    out["all_gather_to_list"] = [o.tolist() for o in outs]
    # all_to_all, even: chunk d (two rows) holds 100 * global rank + d.
    even = torch.tensor([[100.0 * global_rank + d] * 3 for d in range(gang.size) for _ in range(2)])
    received = torch.empty_like(even)
    gang.all_to_all(received, even)
    out["all_to_all_even"] = received[:, 0].tolist()
    # all_to_all, uneven: d + 1 rows to rank d; rank + 1 rows from every peer.
    sends = [d + 1 for d in range(gang.size)]
    uneven = torch.cat([torch.full((n,), 100.0 * global_rank + d) for d, n in enumerate(sends)])
    received = torch.empty(gang.size * (gang.rank + 1))
    gang.all_to_all(received, uneven, [gang.rank + 1] * gang.size, sends)
    out["all_to_all_uneven"] = received.tolist()
    last = gang.size - 1
    t = torch.tensor([float(global_rank)])
    gang.broadcast(t, source_rank=last)
    out["broadcast_from_last"] = t.item()
    objects: list[object] = [
        {"from": global_rank, "nested": [global_rank, ("x", {global_rank})]},
        None,
    ]
    gang.broadcast_objects(objects, source_rank=last)
    out["broadcast_objects_from_last"] = repr(objects)
    gang.barrier()
    out["flag"] = gm.broadcast_flag(gang, global_rank % 2 == 1, source_rank=last)
    out["all_sum"] = gm.all_sum(gang, global_rank).item()
    out["dict"] = gm.all_reduce_dict(gang, {"n": 1, "r": torch.tensor([float(global_rank)])})["n"]
    out["dict_mean"] = gm.all_reduce_dict(gang, {"n": global_rank + 1}, gm.ReduceOperation.MEAN)[
        "n"
    ]
    out["objects"] = gm.all_gather_objects(gang, {"g": global_rank})
    return out


def identical_inputs(gang: gm.Gang) -> dict[str, object]:
    """The new ops with the same tensors on every process: what FakeGang must reproduce."""
    out: dict[str, object] = {}
    base = torch.arange(2.0 * gang.size) + 1.5
    for op in OPS:
        chunk = torch.empty(2)
        gang.reduce_scatter(chunk, base.clone(), op)
        out[f"reduce_scatter_{op.name}"] = chunk.tolist()
    received = torch.empty(2 * gang.size, 2)
    gang.all_to_all(received, torch.arange(4.0 * gang.size).reshape(-1, 2))
    out["all_to_all_even"] = received.tolist()
    splits = [(d * 2 + 1) % 3 for d in range(gang.size)]  # [1, 0, 2, 1] on 4 processes
    mine = splits[gang.rank]
    received = torch.empty(mine * gang.size, 2)
    gang.all_to_all(
        received, torch.arange(2.0 * sum(splits)).reshape(-1, 2), [mine] * gang.size, splits
    )
    out["all_to_all_split"] = received.tolist()
    return out


def main() -> None:
    root = gm.setup_root_gang(timeout=timedelta(seconds=60))
    me = root.rank
    results: dict[str, object] = {"root": exercise(root, me)}
    results["parity"] = {
        "real": identical_inputs(root),
        "fake": identical_inputs(gm.FakeGang(CPU, rank=me, size=root.size)),
    }
    sub = root.create_gang([3, 1, 2])
    results["sub_is_none"] = sub is None
    if sub is not None:
        results["sub"] = exercise(sub, me)
        # Only sub's members (global 1, 2, 3) take part from here on.
        pair = sub.create_gang([2, 0])  # global [2, 3]
        if pair is not None:
            results["pair"] = exercise(pair, me)
        first = sub.create_gang([0, 1])  # global [3, 1]
        second = sub.create_gang([1, 2])  # global [1, 2]: members made different numbers of groups
        for name, gang in (("first", first), ("second", second)):
            if gang is not None:
                t = torch.tensor([float(me)])
                gang.all_reduce(t, gm.ReduceOperation.SUM)
                results[name] = t.item()
    # Everyone again: gangs from one mesh after sub-gangs made by parts of the world.
    gangs = gm.create_gangs(root, tp=2)
    results["mesh_tp"] = exercise(gangs.tp, me)
    results["mesh_dp"] = exercise(gangs.dp, me)
    lone = gangs.tp.create_gang([1])  # a sub-gang of a mesh gang, by that gang's members
    if lone is not None:
        results["lone"] = lone.size
    if sub is not None:
        deeper = sub.create_gang([2, 1])  # global [2, 1]: a sub-gang of a sub-gang, again
        if deeper is not None:
            t = torch.tensor([float(me)])
            deeper.all_reduce(t, gm.ReduceOperation.SUM)
            results["deeper"] = t.item()
    again = gm.create_gangs(root, dp_replicate=2)
    t = torch.tensor([float(me)])
    again.rdp.all_reduce(t, gm.ReduceOperation.SUM)
    results["again_rdp"] = t.item()
    root.barrier()
    write_results(me, results)


main()
