"""A push's plan, for any two layouts and any tensor: each rank's box is what torch.chunk cuts
(nested, the first mesh dimension outermost), every element a receiver holds comes to it
exactly once from a sender that holds it, and no sender carries more than its share where
the senders hold equal shares."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gangmesh.plan.push_plan import PushPlan
from gangmesh.plan.shards import Box, TensorShards
from gangmesh.plan.topology import MeshTopology
from gangmesh.testing.strategies import layouts

PLANS = layouts(max_world_size=16)
SPLITTING = ("dp_replicate", "dp_shard", "cp", "tp", "pp")


@st.composite
def tensors(
    draw: st.DrawFn, plan: MeshTopology, shape: tuple[int, ...] | None = None
) -> TensorShards:
    """A tensor (of ``shape``, or of one to three dimensions), each dimension split by some of
    ``plan``'s dimensions."""
    if shape is None:
        shape = tuple(draw(st.lists(st.integers(0, 9), min_size=1, max_size=3)))
    dims = draw(st.permutations(SPLITTING))
    cuts = draw(st.lists(st.integers(0, len(shape) - 1), min_size=5, max_size=5))
    taken = draw(st.integers(0, 3))
    split: dict[int, list[str]] = {}
    for dim, axis in zip(dims[:taken], cuts, strict=False):
        split.setdefault(axis, []).append(dim)
    return TensorShards(shape, "float32", split)


def chunked(
    whole: torch.Tensor, plan: MeshTopology, shards: TensorShards, rank: int
) -> torch.Tensor:
    """``rank``'s shard as torch.chunk cuts it, the split's first mesh dimension outermost."""
    part = whole
    for axis, dims in shards.split.items():
        for dim in dims:
            pieces = part.chunk(plan.size_of(dim), axis)
            index = plan.rank_in(rank, dim)
            part = pieces[index] if index < len(pieces) else part.narrow(axis, part.shape[axis], 0)
    return part


@settings(max_examples=60, deadline=None)
@given(PLANS, st.data())
def test_each_rank_holds_the_box_torch_chunk_cuts(plan: MeshTopology, data):
    shards = data.draw(tensors(plan), label="tensor")
    whole = torch.arange(int(np.prod(shards.shape)), dtype=torch.float32).reshape(shards.shape)
    for rank in range(plan.world_size):
        box = shards.box(plan, rank)
        expected = chunked(whole, plan, shards, rank)
        got = whole[box.within(Box((0,) * len(shards.shape), shards.shape))]
        assert torch.equal(got, expected) or (got.numel() == expected.numel() == 0)


@settings(max_examples=60, deadline=None)
@given(PLANS, PLANS, st.data())
def test_every_element_a_receiver_holds_comes_once_from_a_sender_that_holds_it(
    senders: MeshTopology, receivers: MeshTopology, data
):
    sent = data.draw(tensors(senders), label="sent")
    received = data.draw(tensors(receivers, sent.shape), label="received")
    plan = PushPlan(senders, {"w": sent}, receivers, {"w": received})
    counts = {r: np.zeros(sent.shape, dtype=int) for r in range(receivers.world_size)}
    for route in plan.routes:
        for piece in route.pieces:
            held = plan.sender_box("w", route.sender)
            assert piece.box.overlap(held) == piece.box, "a sender sends only what it holds"
            for receiver in route.receivers:
                counts[receiver][piece.box.within(Box((0,) * len(sent.shape), sent.shape))] += 1
    whole = Box((0,) * len(sent.shape), sent.shape)
    for receiver, count in counts.items():
        mine = np.zeros(sent.shape, dtype=int)
        mine[plan.receiver_box("w", receiver).within(whole)] = 1
        assert np.array_equal(count, mine), receiver


@settings(max_examples=40, deadline=None)
@given(PLANS, st.integers(1, 64))
def test_senders_that_hold_equal_shares_carry_equal_shares(senders: MeshTopology, rows: int):
    # every sender holds all of it (replicas): each sends about 1/S, never more than a row more
    shards = TensorShards((rows * senders.world_size, 4), "float32", {})
    plan = PushPlan(senders, {"w": shards}, MeshTopology(1), {"w": shards})
    share = plan.total_bytes / senders.world_size
    for rank in range(senders.world_size):
        assert plan.bytes_sent(rank) <= share + 16 * 4, (rank, plan.bytes_sent(rank), share)
