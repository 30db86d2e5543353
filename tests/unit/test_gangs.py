"""Gangs: the root-rank rule, current gangs, wrapping a user's mesh, ownership, argument checks."""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

import gangmesh as gm
from gangmesh.assembly.factories import create_gangs_from_layout
from gangmesh.assembly.mesh_build import BUILT_NAMES
from gangmesh.assembly.mesh_views import MESH_ALIASES
from gangmesh.plan.layout import Layout
from gangmesh.testing import simulate_gangs

CPU = torch.device("cpu")


def fake(rank: int = 0, size: int = 1) -> gm.FakeGang:
    return gm.FakeGang(CPU, rank=rank, size=size)


def members(gang: gm.Gang) -> list[int]:
    return dist.get_process_group_ranks(gang.as_process_group())


def test_root_rank_zero_must_be_rank_zero_everywhere_with_correct_precedence():
    # dp and pp at rank 0 but tp at rank 1: the rule must still reject it.
    with pytest.raises(ValueError, match=r"^tp: root rank 0 must be rank 0 of every gang"):
        gm.Gangs(
            root=fake(0, 4), dp=fake(0, 2), rdp=fake(), sdp=fake(0, 2), tp=fake(1, 2), pp=fake()
        )
    with pytest.raises(ValueError, match=r"^cp"):
        gm.Gangs(
            root=fake(0, 2), dp=fake(), rdp=fake(), sdp=fake(), tp=fake(), pp=fake(), cp=fake(1, 2)
        )
    gm.Gangs(root=fake(1, 4), dp=fake(0, 2), rdp=fake(), sdp=fake(0, 2), tp=fake(1, 2), pp=fake())


def test_gangs_whose_sizes_do_not_make_the_root_are_rejected():
    with pytest.raises(ValueError, match="but world_size is 4"):
        gm.Gangs(root=fake(0, 4), dp=fake(), rdp=fake(), sdp=fake(), tp=fake(0, 2), pp=fake())


def test_hand_built_gangs_default_expert_gangs_only_where_the_plan_has_their_size():
    dense = {"root": fake(0, 8), "dp": fake(0, 4), "rdp": fake(), "sdp": fake(0, 4), "pp": fake()}
    # ep=2 over dp_shard 4: the plan's efsdp and edp have size 2, not sdp's and dp's 4.
    efsdp = r"^efsdp: expected a gang of size 2, .* got none, and its default \(sdp\) has size 4$"
    with pytest.raises(ValueError, match=efsdp):
        gm.Gangs(**dense, tp=fake(0, 2), ep=fake(0, 2))
    edp = r"^edp: expected a gang of size 2, .* got none, and its default \(dp\) has size 4$"
    with pytest.raises(ValueError, match=edp):
        gm.Gangs(**dense, tp=fake(0, 2), ep=fake(0, 2), efsdp=fake(0, 2))
    # etp=1 under tp=2: ep=1 borrows tp too, so the plan's efsdp spans all 8.
    whole = (
        r"^efsdp: expected a gang of size 8, as in the plan MeshTopology\(8, .*etp=1\), got none"
    )
    with pytest.raises(ValueError, match=whole):
        gm.Gangs(**dense, tp=fake(0, 2), etp=fake())
    given = r"^efsdp: expected a gang of size 2, .* got one of size 4$"
    with pytest.raises(ValueError, match=given):
        gm.Gangs(**dense, tp=fake(0, 2), ep=fake(0, 2), efsdp=fake(0, 4), edp=fake(0, 2))
    gangs = gm.Gangs(**dense, tp=fake(0, 2), ep=fake(0, 2), efsdp=fake(0, 2), edp=fake(0, 2))
    assert {name: gangs[name].size for name in ("ep", "efsdp", "etp", "edp")} == {
        name: gangs.plan.size_of(name) for name in ("ep", "efsdp", "etp", "edp")
    }
    assert gm.Gangs(**dense, tp=fake(0, 2)).efsdp is dense["sdp"]


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
    assert [name for name, _ in gangs.items()] == list(gm.topology.GANG_NAMES)
    assert all(gang.size == 1 for _, gang in gangs.items())
    assert gangs.mesh is None and gangs.expert_mesh is None
    gangs.close()
    gangs.close()


def test_gangs_by_name_and_alias():
    with simulate_gangs(16, 13, dp_replicate=2, tp=2, ep=2) as gangs:
        assert gangs["dp_shard"] is gangs["sdp"] is gangs.sdp
        assert gangs["dp_replicate"] is gangs.rdp and gangs["root"] is gangs.root
        assert members(gangs["dp_shard_cp"]) == members(gangs.sdp)
        assert members(gangs["edp"]) == gangs.plan.group_of(13, "edp")
        with pytest.raises(KeyError, match="gang 'model': expected one of root"):
            gangs["model"]


def test_gangs_are_a_read_only_mapping_from_name_to_gang():
    with simulate_gangs(8, 5, tp=2, ep=2) as gangs:
        names = list(gm.topology.GANG_NAMES)
        assert isinstance(gangs, Mapping)
        assert list(gangs) == list(gangs.keys()) == names and len(gangs) == len(names)
        assert [id(g) for g in gangs.values()] == [id(getattr(gangs, n)) for n in names]
        assert dict(gangs.items()) == {name: getattr(gangs, name) for name in names}
        # Lookup also takes root, the full dimension names and the flattened ones built.
        for name in ("tp", "sdp", "root", "dp_shard", "dp_replicate", "dp_shard_cp", "dp_cp"):
            assert name in gangs and gangs.get(name) is gangs[name], name
        # Not an integer index: membership of other names and of ints is just False.
        assert "tensor" not in gangs and 0 not in gangs and None not in gangs
        assert gangs.get("dp") is gangs.dp and gangs.get("nope") is None
        default = gm.FakeGang(CPU)
        assert gangs.get("nope", default) is default


def test_an_unknown_gang_name_is_a_key_error_naming_the_valid_ones():
    with simulate_gangs(4, 1, tp=2) as gangs:
        with pytest.raises(KeyError) as raised:
            gangs["tensor"]
        (message,) = raised.value.args
        assert message.startswith("gang 'tensor': expected one of root, dp_replicate, dp_shard, ")
        listed = message.rpartition("expected one of ")[2].split(", ")
        assert {*gm.topology.GANG_NAMES, "root", "dp_shard_cp", "dp_cp"} <= set(listed)
        assert all(name in gangs for name in listed)


def test_hand_built_gangs_lack_the_flattened_gangs_and_say_so():
    gangs = gm.create_fake_gangs(CPU)
    assert "dp_cp" not in gangs and gangs.get("dp_shard_cp") is None
    assert "sdp" in gangs and gangs["dp_shard"] is gangs.sdp
    with pytest.raises(KeyError, match="gang 'dp_cp': expected one of root, "):
        gangs["dp_cp"]


def test_the_gangs_of_a_gangs_cannot_be_replaced_and_equality_is_identity():
    first, second = gm.create_fake_gangs(CPU), gm.create_fake_gangs(CPU)
    with pytest.raises(AttributeError, match="tp: the gangs of a Gangs are read-only"):
        first.tp = second.tp
    # Same names and gangs, still two objects: a Gangs is equal only to itself and hashable.
    shared = gm.FakeGang(CPU)
    a = gm.Gangs(root=shared, dp=shared, rdp=shared, sdp=shared, tp=shared, pp=shared)
    b = gm.Gangs(root=shared, dp=shared, rdp=shared, sdp=shared, tp=shared, pp=shared)
    assert a == a and a != b and len({a, b, a}) == 2
    assert dict(a.items()).keys() == dict(b.items()).keys()


def test_repr_names_each_gang_its_rank_size_and_members():
    with simulate_gangs(8, 5, tp=2) as gangs:
        assert repr(gangs) == (
            "Gangs(rank 5 of 8: dp 2/4 [1,3,5,7]; sdp 2/4 [1,3,5,7]; tp 1/2 [4,5]; "
            "size 1: rdp, pp, cp, ep, etp; not built: efsdp, edp)"
        )
    with simulate_gangs(8, 5, tp=2, expert=True) as gangs:
        assert "efsdp 5/8 [0,1,2,3,4,5,6,7]; edp 5/8 [0,1,2,3,4,5,6,7]" in repr(gangs)
        assert repr(gangs.tp) == (
            "ProcessGroupGang(name='tp', rank=1, size=2, global_ranks=[4, 5], backend=fake)"
        )
        assert repr(gangs.pp) == "FakeGang(rank=0, size=1, device=cpu)"


def test_from_mesh_wraps_a_users_two_dim_mesh_and_fills_the_rest():
    with simulate_gangs(8, 5):
        mesh = init_device_mesh("cpu", (4, 2), mesh_dim_names=("dp", "tp"))
        gangs = gm.Gangs.from_mesh(mesh)
        assert members(gangs.tp) == [4, 5]
        assert members(gangs.dp) == [1, 3, 5, 7]
        assert gangs.sdp.as_process_group() is gangs.dp.as_process_group() is mesh.get_group("dp")
        assert gangs.rdp.size == 1
        assert (gangs.pp.size, gangs.cp.size) == (1, 1)
        assert gangs.mesh is mesh
        assert gangs.plan == gm.MeshTopology(
            8, dp_shard=4, tp=2, order="pp,dp_replicate,cp,dp_shard,tp"
        )
        gangs.close()


@pytest.mark.parametrize(
    ("names", "shape", "etp"),
    [
        (("dp_shard", "tp"), (4, 2), 1),
        (("dp_replicate", "dp_shard", "tp"), (2, 2, 2), 1),
        (("dp_shard", "tp"), (4, 2), 2),
    ],
)
def test_from_mesh_reads_an_expert_mesh_beside_a_dense_mesh_without_pp(names, shape, etp):
    with simulate_gangs(8, 5):
        mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
        plan = gm.MeshTopology(8, **dict(zip(names, shape, strict=True)), ep=2, etp=etp)
        expert_dims = {name: size for name, size in plan.expert_dims.items() if size > 1}
        expert_mesh = init_device_mesh(
            "cpu", tuple(expert_dims.values()), mesh_dim_names=tuple(expert_dims)
        )
        gangs = gm.Gangs.from_mesh(mesh, expert_mesh=expert_mesh)
        assert gangs.plan.expert_dims == plan.expert_dims
        for name in ("ep", "efsdp", "etp", "edp", "tp", "dp"):
            gang = gangs[name]
            got = members(gang) if gang.size > 1 else [5]
            assert got == list(plan.group_of(5, name)), name
        gangs.close()


@pytest.mark.parametrize("etp", [1, 2])
def test_from_mesh_reads_an_expert_mesh_with_a_size_one_ep_dimension(etp):
    with simulate_gangs(8, 5):
        mesh = init_device_mesh("cpu", (4, 2), mesh_dim_names=("dp_shard", "tp"))
        plan = gm.MeshTopology(8, dp_shard=4, tp=2, etp=etp)
        expert_dims = {n: s for n, s in plan.expert_dims.items() if n in ("efsdp", "ep", "etp")}
        assert expert_dims == {"efsdp": 8 // etp, "ep": 1, "etp": etp}
        expert_mesh = init_device_mesh(
            "cpu", tuple(expert_dims.values()), mesh_dim_names=tuple(expert_dims)
        )
        gangs = gm.Gangs.from_mesh(mesh, expert_mesh=expert_mesh)
        assert gangs.plan.expert_dims == plan.expert_dims and gangs.expert_mesh is expert_mesh
        assert gangs.ep.size == 1
        for name in ("efsdp", "etp", "edp", "tp", "dp"):
            gang = gangs[name]
            got = members(gang) if gang.size > 1 else [5]
            assert got == list(plan.group_of(5, name)), name
        gangs.close()


def test_from_mesh_flattens_replicate_and_shard_into_dp():
    with simulate_gangs(8, 6):
        mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp_replicate", "dp_shard"))
        gangs = gm.Gangs.from_mesh(mesh, timeout=timedelta(seconds=42))
        assert members(gangs.sdp) == [4, 5, 6, 7]
        assert members(gangs.rdp) == [2, 6]
        assert (gangs.dp.rank, gangs.dp.size) == (6, 8)
        # The flattened dp spans the world with another timeout: a group of its own.
        assert gangs.dp.as_process_group() is not gangs.root.as_process_group()
        (dp,) = [info for info in gangs.communicators() if "dp" in info.gangs]
        assert dp.timeout == timedelta(seconds=42) and dp.created


def test_from_mesh_rejects_unknown_names_unnamed_and_scrambled_meshes():
    with simulate_gangs(4, 0):
        with pytest.raises(ValueError, match=r"unknown dimension names \['model'\]"):
            gm.Gangs.from_mesh(init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "model")))
        with pytest.raises(ValueError, match="mesh: expected dimension names"):
            gm.Gangs.from_mesh(init_device_mesh("cpu", (4,)))
        with pytest.raises(TypeError, match="mesh: expected a DeviceMesh"):
            gm.Gangs.from_mesh("dp")  # type: ignore[arg-type]
        scrambled = DeviceMesh(
            "cpu", torch.tensor([[0, 2], [1, 3]]), mesh_dim_names=("dp_shard", "tp")
        )
        with pytest.raises(ValueError, match=r"mesh: expected ranks 0\.\.3 numbered row-major"):
            gm.Gangs.from_mesh(scrambled)


def test_from_mesh_refuses_an_expert_mesh_laid_out_otherwise_than_the_plan():
    with simulate_gangs(8, 0):
        mesh = init_device_mesh("cpu", (4, 2), mesh_dim_names=("dp_shard", "tp"))
        scrambled = DeviceMesh(
            "cpu", torch.tensor([[0, 2], [1, 3], [4, 6], [5, 7]]), mesh_dim_names=("efsdp", "ep")
        )
        with pytest.raises(ValueError, match=r"expert_mesh: expected the plan's expert layout"):
            gm.Gangs.from_mesh(mesh, expert_mesh=scrambled)


def test_closing_wrapped_gangs_keeps_the_users_mesh():
    with simulate_gangs(8, 3):
        mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp_shard", "tp"))
        gm.Gangs.from_mesh(mesh).close()
        assert dist.get_process_group_ranks(mesh.get_group("tp")) == [0, 1, 2, 3]
        t = torch.ones(1)
        dist.all_reduce(t, group=mesh.get_group("tp"))


def test_closing_gangs_keeps_the_root_and_torch_distributed():
    with simulate_gangs(8, 3, tp=2) as gangs:
        again = gm.create_gangs(gangs.root, tp=4)
        again.close()
        assert dist.is_initialized()
        gangs.root.barrier()
        # The first gangs still work: nothing they use was destroyed.
        gangs.tp.all_reduce(torch.ones(1), gm.ReduceOperation.SUM)


def test_refined_gangs_share_groups_and_survive_the_first_closing():
    with simulate_gangs(8, 5) as root_gangs:
        parallel = gm.create_parallel_gangs(root_gangs.root, tp_size=2)
        fsdp = gm.create_fsdp_gangs(parallel, intra_node_size=2)
        assert fsdp.tp.as_process_group() is parallel.tp.as_process_group()
        assert fsdp.dp.as_process_group() is parallel.dp.as_process_group()
        parallel.close()
        for _, gang in fsdp.items():
            if gang.size > 1:
                gang.all_reduce(torch.ones(1), gm.ReduceOperation.SUM)
        assert members(fsdp.sdp) == [5, 7] and members(fsdp.rdp) == [1, 5]


def test_one_communicator_per_distinct_rank_set_and_none_of_size_one():
    with simulate_gangs(8, 5, tp=2) as gangs:
        report = gangs.communicators()
        assert [(info.ranks, info.gangs, info.created) for info in report] == [
            ((4, 5), ("tp",), True),
            ((1, 3, 5, 7), ("dp_shard", "dp", "dp_shard_cp", "dp_cp"), True),
            ((0, 1, 2, 3, 4, 5, 6, 7), ("root",), False),
        ]
        assert {info.timeout for info in report} == {gm.DEFAULT_TIMEOUT}
    with simulate_gangs(8, 5, tp=2, expert=True) as gangs:
        assert gangs.communicators()[-1].gangs == ("root", "efsdp", "edp")


def test_a_dense_job_holds_no_group_that_only_the_expert_view_uses():
    dense = {"pp": 2, "dp_replicate": 2, "dp_shard": 4, "cp": 2, "tp": 8}
    with simulate_gangs(256, 0, **dense) as gangs:
        plan = gangs.plan
        held = {info.ranks for info in gangs.communicators()}
        names = [n for n in BUILT_NAMES if n not in ("efsdp", "edp")]
        dense_groups = {tuple(plan.group_of(0, name)) for name in names} | {tuple(range(256))}
        assert held <= dense_groups and len(held) == 9  # root, 4 dimensions, 4 flattened
        assert gangs.expert_mesh is None and "edp" not in gangs.meshes
        assert (gangs.efsdp.size, gangs.edp.size) == (64, 128)  # the plan's, for reports
        with pytest.raises(gm.GangError, match=r"create_gangs\(\.\.\., expert=True\)"):
            gangs.efsdp.all_reduce(torch.ones(1), gm.ReduceOperation.SUM)
    with simulate_gangs(256, 0, **dense, expert=True) as gangs:
        sizes = sorted(len(info.ranks) for info in gangs.communicators())
        assert 64 in sizes and 128 in sizes and len(sizes) == 11


def test_a_dimension_spanning_the_world_shares_the_root_group():
    with simulate_gangs(8, 2) as gangs:
        assert gangs.dp.as_process_group() is gangs.root.as_process_group()
        assert [info.gangs for info in gangs.communicators()] == [
            ("root", "dp_shard", "dp", "dp_shard_cp", "dp_cp")
        ]


def test_create_gangs_needs_the_whole_world_as_root():
    with simulate_gangs(8, 1, tp=2) as gangs:
        with pytest.raises(ValueError, match="root_gang: expected the gang of the default"):
            gm.create_gangs(gangs.tp, tp=2)


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda r: gm.create_gangs(r, tp=3), "cannot infer its size"),
        (lambda r: gm.create_gangs(r, tp=-1, pp=-1), "at most one size may be -1"),
        (lambda r: gm.create_gangs(r, timeout=timedelta(0)), "timeout: expected a positive"),
        (lambda r: gm.create_gangs(r, ep=3), "ep: expected a factor"),
        (lambda r: gm.create_gangs(r, tp=2, ep=2, etp=4), "etp: expected 1"),
        (
            lambda r: gm.create_gangs(r, ep=2, order="tp,cp,pp,dp_replicate,dp_shard"),
            "order: with ep=2",
        ),
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


def test_a_layout_is_checked_once_per_create_gangs_and_create_fsdp_gangs(monkeypatch):
    built = []
    init = Layout.__init__

    def counted(self, **kwargs):
        built.append(kwargs)
        init(self, **kwargs)

    monkeypatch.setattr(Layout, "__init__", counted)
    with simulate_gangs(8, 5) as gangs:
        built.clear()
        parallel = gm.create_gangs(gangs.root, dp_replicate=-1, dp_shard=1, tp=2)
        assert len(built) == 1
        fsdp = gm.create_fsdp_gangs(parallel, intra_node_size=2)
        # The plan's layout (sizes resolved), then its split: no layout is checked again.
        assert [layout["dp_shard"] for layout in built[1:]] == [1, 2]
        assert fsdp.plan.layout == Layout(dp_replicate=2, dp_shard=2, tp=2)
        layout = Layout(tp=4)
        built.clear()
        again = create_gangs_from_layout(gangs.root, layout)
        assert built == [] and again.plan == gm.MeshTopology.from_layout(8, layout)
        for made in (parallel, fsdp, again):
            made.close()


def test_closed_gangs_refuse_work_with_a_gang_error():
    with simulate_gangs(4, 1, tp=2) as gangs:
        tp = gangs.tp
    with pytest.raises(gm.GangError, match="is closed"):
        tp.as_process_group()
    with pytest.raises(
        gm.GangError, match=r"all_reduce: gang 'tp' \(size 2, rank 1, global rank 1\) is closed"
    ):
        tp.all_reduce(torch.ones(1), gm.ReduceOperation.SUM)


def test_setup_root_gang_wraps_an_already_initialised_default_group():
    with simulate_gangs(16, 9) as gangs:
        root = gm.setup_root_gang()
        assert isinstance(root, gm.ProcessGroupGang)
        assert (root.rank, root.size) == (9, 16)
        assert root.as_process_group() is gangs.root.as_process_group()
        root.close()
        assert dist.is_initialized(), "a wrapped default group is not the wrapper's to destroy"


MESH_DIMS = {
    "dense": ("pp", "dp_replicate", "dp_shard", "cp", "tp"),
    "dp_shard_cp": ("pp", "dp_replicate", "dp_shard_cp", "tp"),
    "dp_cp": ("pp", "dp_cp", "tp"),
    "dp": ("pp", "dp", "cp", "tp"),
    "expert": ("pp", "dp_replicate", "efsdp", "ep", "etp"),
    "edp": ("pp", "edp", "ep", "etp"),
}


@pytest.mark.parametrize(
    "dims",
    [
        {"pp": 2, "dp_replicate": 2, "dp_shard": 2, "cp": 2, "tp": 2, "ep": 4},
        {"dp_replicate": 2, "dp_shard": 2, "cp": 2, "tp": 4, "ep": 2, "etp": 4},
        {
            "dp_shard": 4,
            "cp": 2,
            "tp": 4,
            "order": "tp,pp,dp_replicate,cp,dp_shard",
            "expert": True,
        },
    ],
)
def test_each_mesh_lays_out_the_plan_over_the_gangs_own_groups(dims):
    with simulate_gangs(32, 13, **dims) as gangs:
        plan = gangs.plan
        assert list(gangs.meshes) == list(MESH_DIMS)  # the expert ones at ep = 1 too, if asked
        for name, mesh in gangs.meshes.items():
            names = mesh.mesh_dim_names or ()
            wanted = MESH_DIMS[name]
            if name == "dense":
                wanted = plan.order
            elif "order" in dims and name not in ("expert", "edp"):
                # tp outermost, merged dimensions where their first one was
                wanted = ("tp", *(n for n in wanted if n != "tp"))
            assert names == wanted, name
            for dim in names:
                assert mesh[dim].mesh.tolist() == plan.group_of(13, dim), (name, dim)
                gang = gangs[dim]
                if gang.size > 1:
                    assert mesh.get_group(dim) is gang.as_process_group(), (name, dim)
        meshes = gangs.meshes
        assert gangs.mesh is meshes["dense"] and gangs.expert_mesh is meshes.get("expert")
        with pytest.raises(KeyError, match="expected one of dense"):
            meshes["model"]


TORCHTITAN_DIMS = {
    "fsdp": ("pp", "dp_replicate", "fsdp", "tp"),
    "batch": ("pp", "batch", "cp", "tp"),
    "loss": ("pp", "loss", "tp"),
    "efsdp": ("pp", "dp_replicate", "efsdp", "ep", "etp"),
}
"""The meshes under torchtitan's names, with its names of their dimensions."""
HANDED_OUT = {"pp": 2, "dp_replicate": 2, "dp_shard": 2, "cp": 2, "tp": 2, "ep": 4}
"""A layout where every mesh has a dimension of each size above 1."""


def test_meshes_under_torchtitan_s_names_slice_by_torchtitan_s_dimension_names():
    with simulate_gangs(32, 13, **HANDED_OUT) as gangs:
        meshes = gangs.meshes
        for alias, names in TORCHTITAN_DIMS.items():
            mesh = meshes[alias]
            assert mesh.mesh_dim_names == names, alias
            assert meshes[alias] is mesh, "made once, then the same mesh"
            ours = meshes[MESH_ALIASES[alias]]
            assert mesh.mesh.tolist() == ours.mesh.tolist()
            for our_name, name in zip(ours.mesh_dim_names or (), names, strict=True):
                assert mesh.get_group(name) is ours.get_group(our_name), (alias, name)
        hsdp = meshes["fsdp"]["dp_replicate", "fsdp"]  # torchtitan's FSDP2 slice
        assert (
            hsdp.mesh.tolist() == meshes["dp_shard_cp"]["dp_replicate", "dp_shard_cp"].mesh.tolist()
        )
        assert meshes["efsdp"] is meshes["expert"], "its dimensions have torchtitan's names"
        assert meshes["loss"]["loss"].mesh.tolist() == gangs.plan.group_of(13, "dp_cp")
        with pytest.raises(KeyError, match="dp_shard_cp"):
            meshes["fsdp"]["dp_shard_cp"]  # torch's own error names the dimensions it has


@pytest.mark.parametrize("name", [*MESH_DIMS, *TORCHTITAN_DIMS])
def test_from_mesh_takes_every_mesh_gangmesh_hands_out(name):
    with simulate_gangs(32, 13, **HANDED_OUT) as gangs:
        mesh = gangs.meshes[name]
        wrapped = gm.Gangs.from_mesh(mesh)
        assert wrapped.plan.sizes() == gangs.plan.sizes(), "the plan of the gangs, not a guess"
        for dim in BUILT_NAMES:
            gang, again = gangs[dim], wrapped[dim]
            assert (again.rank, again.size) == (gang.rank, gang.size), dim
            if gang.size > 1:
                assert again.as_process_group() is gang.as_process_group(), dim
        assert wrapped.meshes[name] is mesh, "kept under the name it was handed out under"
        assert wrapped.meshes[MESH_ALIASES.get(name, name)].mesh_dim_names == (
            gangs.meshes[MESH_ALIASES.get(name, name)].mesh_dim_names
        )
        wrapped.close()
        gangs.tp.all_reduce(torch.ones(1), gm.ReduceOperation.SUM)  # lent: still open


@pytest.mark.parametrize(("names", "shape", "sizes"), [
    (("dp_replicate", "fsdp", "tp"), (2, 2, 2), {"dp_replicate": 2, "dp_shard": 2, "tp": 2}),
    (("pp", "batch", "cp"), (2, 2, 2), {"pp": 2, "dp_shard": 2, "cp": 2}),
    (("loss", "tp"), (4, 2), {"dp_shard": 4, "tp": 2}),
    (("dp_replicate", "dp_shard_cp"), (2, 4), {"dp_replicate": 2, "dp_shard": 4}),
])  # fmt: skip
def test_from_mesh_reads_a_merged_data_dimension_built_by_hand_as_the_shards(names, shape, sizes):
    with simulate_gangs(8, 5):
        mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
        gangs = gm.Gangs.from_mesh(mesh)
        assert gangs.plan.sizes() == gm.MeshTopology(8, **sizes).sizes()
        assert gangs.mesh is mesh
        gangs.close()
        both = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp_shard", "dp_shard_cp"))
        with pytest.raises(
            ValueError, match=r"'dp_shard_cp' \(merging dp_shard, cp\) cannot go with dp_shard"
        ):
            gm.Gangs.from_mesh(both)


def test_meshes_are_read_only_and_fake_gangs_have_none():
    gangs = gm.create_fake_gangs(CPU)
    assert dict(gangs.meshes) == {}
    with pytest.raises(KeyError, match="'loss' \\(the name of 'dp_cp'\\) is not built here"):
        gangs.meshes["loss"]
    with pytest.raises(TypeError):
        gangs.meshes["dense"] = None  # type: ignore[index]


def test_a_mesh_gang_or_group_of_another_world_is_refused_saying_whose_it_is():
    with simulate_gangs(8, 0, tp=2) as simulated:
        mesh, tp, group = simulated.mesh, simulated.tp, simulated.tp.as_process_group()
    root = gm.setup_root_gang(CPU)  # a real job of one process
    try:
        this_job = re.escape("is not this job's (this job is 1 process on gloo)")
        with pytest.raises(ValueError, match=r"^mesh: the 'dense' mesh \{.*'tp': 2\} of closed "
                           rf"gangs \(MeshTopology\(8, .*\)\) {this_job}"):  # fmt: skip
            gm.Gangs.from_mesh(mesh)
        with pytest.raises(ValueError, match=r"^root_gang: gang 'tp' \(size 2, rank 0, global "
                           r"rank 0\) is closed"):  # fmt: skip
            gm.create_gangs(tp)
        with pytest.raises(ValueError, match=rf"^pg: process group '.+' of 2 processes {this_job}"):
            gm.ProcessGroupGang(group, CPU)
    finally:
        root.close()
