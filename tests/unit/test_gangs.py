"""Gangs: the root-rank rule, current gangs, wrapping a user's mesh, argument checks."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import gangmesh as gm
from gangmesh.testing import simulate_gangs

CPU = torch.device("cpu")


def fake(rank: int = 0, size: int = 1) -> gm.FakeGang:
    return gm.FakeGang(CPU, rank=rank, size=size)


def test_root_rank_zero_must_be_rank_zero_everywhere_with_correct_precedence():
    # dp and pp at rank 0 but tp at rank 1: the rule must still reject it.
    with pytest.raises(ValueError, match=r"^tp: root rank 0 must be rank 0 of every gang"):
        gm.Gangs(root=fake(0, 4), dp=fake(), rdp=fake(), sdp=fake(), tp=fake(1, 2), pp=fake())
    with pytest.raises(ValueError, match="cp"):
        gm.Gangs(
            root=fake(0, 4), dp=fake(), rdp=fake(), sdp=fake(), tp=fake(), pp=fake(), cp=fake(1, 2)
        )
    gm.Gangs(root=fake(1, 4), dp=fake(), rdp=fake(), sdp=fake(), tp=fake(1, 2), pp=fake())


def test_current_gangs_nest_and_are_per_thread():
    outer, inner = gm.create_fake_gangs(CPU), gm.create_fake_gangs(CPU)
    assert gm.maybe_get_current_gangs() is None
    seen_in_thread = []
    with outer as entered:
        assert entered is outer and gm.maybe_get_current_gangs() is outer
        with inner:
            assert gm.maybe_get_current_gangs() is inner
            thread = threading.Thread(
                target=lambda: seen_in_thread.append(gm.maybe_get_current_gangs())
            )
            thread.start()
            thread.join()
        assert gm.maybe_get_current_gangs() is outer
    assert gm.maybe_get_current_gangs() is None
    assert seen_in_thread == [None]


def test_fake_gangs_of_one_process():
    gangs = gm.create_fake_gangs(CPU)
    assert [gang.size for _, gang in gangs.items()] == [1] * 6
    assert gangs.mesh is None
    gangs.close()
    gangs.close()


def test_from_mesh_wraps_a_users_two_dim_mesh_and_fills_the_rest():
    with simulate_gangs(8, 5):
        mesh = init_device_mesh("cpu", (4, 2), mesh_dim_names=("dp", "tp"))
        gangs = gm.Gangs.from_mesh(mesh)
        assert dist.get_process_group_ranks(gangs.tp.as_process_group()) == [4, 5]
        assert dist.get_process_group_ranks(gangs.dp.as_process_group()) == [1, 3, 5, 7]
        assert gangs.sdp is gangs.dp and gangs.rdp.size == 1
        assert (gangs.pp.size, gangs.cp.size) == (1, 1)
        assert gangs.mesh is mesh


def test_from_mesh_flattens_replicate_and_shard_into_dp():
    with simulate_gangs(8, 6):
        mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp_replicate", "dp_shard"))
        gangs = gm.Gangs.from_mesh(mesh)
        assert dist.get_process_group_ranks(gangs.sdp.as_process_group()) == [4, 5, 6, 7]
        assert dist.get_process_group_ranks(gangs.rdp.as_process_group()) == [2, 6]
        assert (gangs.dp.rank, gangs.dp.size) == (6, 8)


def test_from_mesh_rejects_unknown_names_and_unnamed_meshes():
    with simulate_gangs(4, 0):
        with pytest.raises(ValueError, match=r"unknown dimension names \['model'\]"):
            gm.Gangs.from_mesh(init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "model")))
        with pytest.raises(ValueError, match="mesh: expected dimension names"):
            gm.Gangs.from_mesh(init_device_mesh("cpu", (4,)))
        with pytest.raises(TypeError, match="mesh: expected a DeviceMesh"):
            gm.Gangs.from_mesh("dp")  # type: ignore[arg-type]


def test_create_gangs_needs_the_whole_world_as_root():
    with simulate_gangs(8, 1) as gangs:
        with pytest.raises(ValueError, match="root_gang: expected the gang of the default"):
            gm.create_gangs(gangs.tp, tp=2)


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda r: gm.create_gangs(r, tp=3), "cannot infer its size"),
        (lambda r: gm.create_gangs(r, tp=-1, pp=-1), "at most one size may be -1"),
        (lambda r: gm.create_gangs(r, timeout=timedelta(0)), "timeout: expected a positive"),
        (lambda r: gm.create_parallel_gangs(r, tp_size=3), r"tp_size: expected a factor of root"),
        (lambda r: gm.create_parallel_gangs(r, tp_size=0), "tp_size: expected an int >= 1"),
        (
            lambda r: gm.create_fsdp_gangs(gm.create_parallel_gangs(r), intra_node_size=3),
            r"intra_node_size: expected a factor of gangs\.dp\.size \(8\)",
        ),
    ],
)
def test_bad_sizes_are_value_errors_before_any_group_exists(call, needle):
    with pytest.raises(ValueError, match=needle):
        call(fake(0, 8))


def test_closed_gangs_refuse_work_with_a_gang_error():
    with simulate_gangs(4, 1) as gangs:
        tp = gangs.tp
    with pytest.raises(gm.GangError, match="is closed"):
        tp.as_process_group()


def test_setup_root_gang_wraps_an_already_initialised_default_group():
    with simulate_gangs(16, 9) as gangs:
        root = gm.setup_root_gang()
        assert isinstance(root, gm.ProcessGroupGang)
        assert (root.rank, root.size) == (9, 16)
        assert root.as_process_group() is gangs.root.as_process_group()
