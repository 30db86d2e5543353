"""Two jobs of one process each, launched apart and joined on one GPU (NCCL): the trainer
pushes a weight, the generator receives it.

    joined_cuda.py OUT trainer|generator ADDRESS

Each job is its own NCCL "host" (NCCL_HOSTID), so that NCCL lets both use GPU 0 (its socket
transport on loopback).
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import torch
from common import write_results

import gangmesh as gm


def main() -> None:
    role, address = sys.argv[2], sys.argv[3]
    os.environ["NCCL_HOSTID"] = f"host-{role}"
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    sys.argv[1] = os.path.join(sys.argv[1], role)  # where write_results writes
    device = torch.device("cuda", 0)
    root = gm.setup_root_gang(device, timeout=timedelta(seconds=60))
    shards = {"w": gm.TensorShards((8, 4), "float32")}
    other = "generator" if role == "trainer" else "trainer"
    joined = gm.join_jobs(root, job=role, other=other, address=address, plan={},
                          shards=shards, timeout=timedelta(seconds=30))  # fmt: skip
    weight = torch.arange(32, dtype=torch.float32, device=device).reshape(8, 4)
    if role == "trainer":
        write_results(0, {"pushed": joined.push(7, {"w": weight})})
    else:
        got = torch.zeros_like(weight)
        version = joined.receive({"w": got})
        write_results(0, {"version": version, "equal": bool(torch.equal(got, weight))})
    joined.close()
    root.close()


if __name__ == "__main__":
    main()
