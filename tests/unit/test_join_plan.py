"""Joining jobs launched apart, without processes: the push's plan and its pieces, the pairing
of ranks across two plans, and every bad argument refused with its name before any process
would wait."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch

import gangmesh as gm
from gangmesh.assembly import weight_push
from gangmesh.assembly.weight_push import (
    buffer,
    check_tensors,
    direct,
    header,
    landing,
    pack,
    sent,
    unpack,
)
from gangmesh.plan.join_plan import JoinPlan, plan_from_record, plan_record
from gangmesh.plan.push_plan import PushPlan
from gangmesh.plan.shards import Box, TensorShards
from gangmesh.plan.topology import MeshTopology
from gangmesh.testing import simulate_gangs

TRAINER = MeshTopology(4, dp_shard=2, tp=2)
GENERATOR = MeshTopology(4, dp_replicate=2, tp=2)
SENT = {
    "w": TensorShards((8, 6), "bfloat16", {0: ("tp", "dp_shard")}),
    "b": TensorShards((5,), "float32", {0: ("dp_shard",)}),
}
RECEIVED = {
    "w": TensorShards((8, 6), "bfloat16", {0: ("tp",)}),
    "b": TensorShards((5,), "float32", {}),
}


def test_each_trainer_shard_goes_to_the_generator_ranks_of_its_tp_rank_only():
    plan = PushPlan(TRAINER, SENT, GENERATOR, RECEIVED)
    weights = {
        (r.sender, r.receivers): [p.box.text() for p in r.pieces if p.name == "w"]
        for r in plan.routes
    }
    assert weights[0, (0, 2)] == ["[0:2, 0:6]"] and weights[1, (1, 3)] == ["[4:6, 0:6]"]
    assert weights[2, (0, 2)] == ["[2:4, 0:6]"] and weights[3, (1, 3)] == ["[6:8, 0:6]"]


def test_pieces_of_mixed_dtypes_cross_bit_identical_packed_or_on_their_own(monkeypatch):
    # "big" is split by columns on the receivers: its pieces (256 KiB, on their own here) land
    # in a part of the receiver's tensor that is not one run of memory, and are copied there
    monkeypatch.setattr(weight_push, "DIRECT", 256 * 1024)
    shards = {**SENT, "big": TensorShards((4096, 128), "float32", {0: ("tp", "dp_shard")})}
    wanted = {**RECEIVED, "big": TensorShards((4096, 128), "float32", {1: ("tp",)})}
    plan = PushPlan(TRAINER, shards, GENERATOR, wanted)
    assert any(direct(route) for route in plan.routes)
    torch.manual_seed(0)
    whole = {"w": torch.randn(8, 6).bfloat16(), "b": torch.randn(5), "big": torch.randn(4096, 128)}

    def part(name: str, box: Box) -> torch.Tensor:
        return whole[name][box.within(Box((0,) * whole[name].dim(), tuple(whole[name].shape)))]

    held = {r: {n: part(n, plan.sender_box(n, r)).clone() for n in whole} for r in range(4)}
    for receiver in range(4):
        mine = {n: torch.zeros_like(part(n, plan.receiver_box(n, receiver))) for n in whole}
        for route in plan.routes:
            if receiver not in route.receivers:
                continue
            data = buffer(route, torch.device("cpu"))
            pack(route, plan, held[route.sender], 7, 3, data)
            assert header(data) == (7, 3)
            unpack(route, plan, data, receiver, mine)
            for piece in direct(route):  # what a broadcast of the piece does
                into, then = landing(piece, plan, receiver, mine)
                into.copy_(sent(piece, plan, route.sender, held[route.sender]))
                if then is not None:
                    then.copy_(into)
        for name in whole:
            assert torch.equal(mine[name], part(name, plan.receiver_box(name, receiver)))


def test_two_plans_pair_their_ranks_by_coordinate_and_cross_as_records():
    plan = JoinPlan({"trainer": TRAINER, "generator": GENERATOR})
    assert plan.pair_by_coordinate("tp", where={"trainer": {"dp_shard": 1}}) == [
        {"trainer": [2], "generator": [0, 2]},
        {"trainer": [3], "generator": [1, 3]},
    ]
    assert plan_from_record(plan_record(GENERATOR)) == GENERATOR
    assert TensorShards.from_record(SENT["w"].record()) == SENT["w"]


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: TensorShards((4, -1), "float32"), r"shape: expected lengths >= 0"),
        (lambda: TensorShards((4,), "float31"), r"dtype: expected one of .*got 'float31'"),
        (
            lambda: TensorShards((4,), "float32", {1: ("tp",)}),
            r"split: expected tensor dimensions in \[0, 1\)",
        ),
        (
            lambda: TensorShards((4,), "float32", {0: ("tp", "tp")}),
            r"split: expected each mesh dimension once",
        ),
        (
            lambda: PushPlan(TRAINER, SENT, GENERATOR, {"w": RECEIVED["w"]}),
            r"received: .*not received: b",
        ),
        (
            lambda: PushPlan(
                TRAINER, SENT, GENERATOR, {**RECEIVED, "b": TensorShards((6,), "float32")}
            ),
            r"received\['b'\]: expected shape \[5\] and dtype float32 as sent, got \[6\]",
        ),
        (
            lambda: PushPlan(
                TRAINER,
                {**SENT, "b": TensorShards((5,), "float32", {0: ("sp",)})},
                GENERATOR,
                RECEIVED,
            ),
            r"sent\['b'\]: split by 'sp', which is no dimension of the layout",
        ),
        (lambda: JoinPlan({"trainer": TRAINER}), r"plans: expected the plans of two jobs"),
    ],
)
def test_bad_shards_plans_and_pairs_are_refused_naming_the_argument(call, words):
    with pytest.raises(ValueError, match=words):
        call()


@pytest.mark.parametrize(
    ("tensors", "words"),
    [
        ({"w": torch.zeros(2, 6, dtype=torch.bfloat16)}, r"tensors: expected b, w; missing b"),
        (
            {
                "w": torch.zeros(2, 6, dtype=torch.bfloat16),
                "b": torch.zeros(3),
                "x": torch.zeros(1),
            },
            r"tensors: expected b, w; unknown x",
        ),
        (
            {"w": torch.zeros(4, 6, dtype=torch.bfloat16), "b": torch.zeros(3)},
            r"tensors\['w'\]: expected this rank's shard \[0:2, 0:6\] of \[8, 6\], shape \[2, 6\] and "
            r"dtype torch.bfloat16; got shape \[4, 6\]",
        ),
        (
            {"w": torch.zeros(2, 6), "b": torch.zeros(3)},
            r"tensors\['w'\]: .* dtype torch.bfloat16; got shape \[2, 6\] and dtype torch.float32",
        ),
    ],
)
def test_tensors_that_are_not_the_rank_s_shards_are_refused_before_a_push(tensors, words):
    plan = PushPlan(TRAINER, SENT, GENERATOR, RECEIVED)
    with pytest.raises(ValueError, match=words):
        check_tensors(tensors, plan, 0, True, torch.device("cpu"))


GOOD = {
    "job": "trainer",
    "other": "generator",
    "address": "127.0.0.1:1",
    "plan": {"dp_shard": 2, "tp": 2},
    "timeout": timedelta(seconds=10),
}


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"job": "tp"}, r"job: part name 'tp' is the name of a dimension"),
        ({"other": "trainer"}, r"other: expected another job's name than this job's"),
        ({"address": "127.0.0.1"}, r"address: expected 'host:port'"),
        ({"plan": {"tp": 3}}, r"tp"),
        (
            {"plan": MeshTopology(8, tp=2)},
            r"plan: expected a plan of this job's 4 processes, got one of 8",
        ),
        (
            {"shards": {"w": TensorShards((4,), "float32", {0: ("sp",)})}},
            r"shards\['w'\]: split by 'sp'",
        ),
        (
            {"timeout": timedelta(minutes=20)},
            r"timeout: expected at most the root gang's timeout less 5 s \(895 s\), got 1200 s",
        ),
        ({"wait": timedelta(seconds=-1)}, r"wait: expected a positive datetime.timedelta"),
    ],
)
def test_join_jobs_refuses_bad_arguments_naming_them_before_it_connects(change, words):
    with simulate_gangs(4, 0, tp=2) as gangs:
        with pytest.raises(ValueError, match=words):
            gm.join_jobs(gangs.root, **{**GOOD, **change})


def test_a_join_server_listens_only_where_asked():
    with pytest.raises(ValueError, match=r"port: expected a port in \[0, 65536\)"):
        gm.serve_join(port=70000)
    with pytest.raises(ValueError, match=r"host: expected an address of this host"):
        gm.serve_join("192.0.2.1")
    with gm.serve_join() as server:
        assert server.address == f"127.0.0.1:{server.port}" and server.keys() == 0
