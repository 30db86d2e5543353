"""One side of two jobs launched apart and joined: a trainer that trains and pushes its
weights every step, or a generator that receives them and runs the model.

    joined_push.py OUT trainer|generator ADDRESS TRAINER_LAYOUT GENERATOR_LAYOUT STEPS

Each trainer rank writes what it sent; trainer rank 0 writes, per step, the digest of the part
of each whole weight that each generator rank holds; each generator rank writes the version
it received and the digests of what it holds.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import torch
from common import write_results
from joined_model import (
    LAYOUTS,
    digest,
    full_weights,
    generate,
    local_shards,
    make_model,
    shards,
    train_step,
)

import gangmesh as gm
from gangmesh.plan.shards import Box


def refused(call: Callable[[], object]) -> str:
    """The message of the ValueError a call raises."""
    try:
        call()
    except ValueError as ex:
        return str(ex)
    return "not refused"


def main() -> None:
    role, address = sys.argv[2], sys.argv[3]
    sys.argv[1] = str(Path(sys.argv[1]) / role)  # where write_results writes
    layouts = {"trainer": LAYOUTS[sys.argv[4]], "generator": LAYOUTS[sys.argv[5]]}
    steps = int(sys.argv[6])
    training = role == "trainer"
    root = gm.setup_root_gang(timeout=timedelta(seconds=60))
    gangs = gm.create_gangs(root, **layouts[role])
    model = make_model(gangs, train=training)
    joined = gm.join_jobs(
        root, job=role, other="generator" if training else "trainer", address=address,
        plan=gangs.plan, shards=shards(gangs, train=training), timeout=timedelta(seconds=30),
    )  # fmt: skip
    plan = joined.push_plan("trainer")
    out: dict[str, object] = {"epoch": joined.epoch, "steps": []}
    # bad input: refused on each process before it waits for another
    out["bad_rank"] = refused(lambda: joined.bridge(trainer=[0], generator=[4]))
    out["bad_job"] = refused(lambda: joined.bridge(critic=[0]))
    out["twice"] = refused(lambda: joined.bridge(generator=[1, 1]))
    wrong = {name: t.double() for name, t in local_shards(model).items()}
    out["bad_tensors"] = refused(
        lambda: joined.push(0, wrong) if training else joined.receive(wrong)
    )
    # a bridge: trainer rank 0 to every generator rank
    bridge = joined.bridge(
        trainer=[0], generator=list(range(joined.plan.plans["generator"].world_size))
    )
    if bridge is not None:
        said = torch.tensor([42.0 if training else 0.0])
        bridge.broadcast(said, bridge.members.index(("trainer", 0)))
        out["bridged"] = [bridge.rank, bridge.size, said.item()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1) if training else None
    for step in range(steps):
        if optimizer is not None:
            train_step(model, optimizer, step)
            pushed = joined.push(step, local_shards(model))
            full = full_weights(model)
            wanted = {
                name: [
                    digest(
                        whole[
                            plan.receiver_box(name, g).within(
                                Box((0,) * whole.dim(), tuple(whole.shape))
                            )
                        ]
                    )
                    for g in range(joined.other_plan.world_size)
                ]
                for name, whole in full.items()
            }
            out["steps"].append({"pushed": pushed, "wanted": wanted})  # type: ignore[attr-defined]
        else:
            version = joined.receive(local_shards(model))
            held = {name: digest(t) for name, t in local_shards(model).items()}
            out["steps"].append({"version": version, "held": held, "out": generate(model, step)})  # type: ignore[attr-defined]
    if training:
        out["sent"] = plan.bytes_sent(root.rank)
        out["total"] = plan.total_bytes
        out["senders"] = root.size
    joined.close()
    gangs.close()
    write_results(root.rank, out)
    root.close()


if __name__ == "__main__":
    main()
