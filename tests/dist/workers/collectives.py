"""Every collective on the root gang and on sub-gangs, 4 processes; results to JSON."""

from __future__ import annotations

from datetime import timedelta

import torch
from common import write_results

import gangmesh as gm

OPS = list(gm.ReduceOperation)


def exercise(gang: gm.Gang, global_rank: int) -> dict[str, object]:
    """Run each collective with values derived from the global rank."""
    out: dict[str, object] = {"rank": gang.rank, "size": gang.size}
    for op in OPS:
        t = torch.tensor([global_rank + 1.0, -(global_rank + 1.0)])
        gang.all_reduce(t, op)
        out[f"all_reduce_{op.name}"] = t.tolist()
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
    last = gang.size - 1
    t = torch.tensor([float(global_rank)])
    gang.broadcast(t, source_rank=last)
    out["broadcast_from_last"] = t.item()
    objects: list[object] = [{"from": global_rank, "nested": [global_rank, ("x", {global_rank})]}, None]
    gang.broadcast_objects(objects, source_rank=last)
    out["broadcast_objects_from_last"] = repr(objects)
    gang.barrier()
    out["flag"] = gm.broadcast_flag(gang, global_rank % 2 == 1, source_rank=last)
    out["all_sum"] = gm.all_sum(gang, global_rank).item()
    out["dict"] = gm.all_reduce_dict(gang, {"n": 1, "r": torch.tensor([float(global_rank)])})["n"]
    out["objects"] = gm.all_gather_objects(gang, {"g": global_rank})
    return out


def main() -> None:
    root = gm.setup_root_gang(timeout=timedelta(seconds=60))
    me = root.rank
    results: dict[str, object] = {"root": exercise(root, me)}
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
    root.barrier()
    write_results(me, results)


main()
