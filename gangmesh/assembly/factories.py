"""The ways to make a Gangs: from a layout, fairseq2's data/tensor split, FSDP/HSDP, one process."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable, Sequence
from datetime import timedelta

import torch
from typing_extensions import Unpack

from gangmesh.assembly import mesh_build
from gangmesh.assembly.agreement import LayoutAgreement
from gangmesh.assembly.gangs import Gangs
from gangmesh.assembly.replicas import Replicas
from gangmesh.assembly.roots import check_root
from gangmesh.plan._checks import InvalidTypeError, check_positive, check_timeout
from gangmesh.plan.cluster import Site
from gangmesh.plan.dim_keywords import with_keywords
from gangmesh.plan.dims import DENSE_DIMS
from gangmesh.plan.layout import LAYOUT_DEFAULTS, Layout, LayoutKeywords
from gangmesh.plan.placement import given_sites, place, placement_request, this_site
from gangmesh.plan.topology import MeshTopology
from gangmesh.runtime.fake_gang import FakeGang
from gangmesh.runtime.gang import DEFAULT_TIMEOUT, Gang
from gangmesh.runtime.ops import all_gather_objects
from gangmesh.runtime.process_group_gang import ProcessGroupGang

log = logging.getLogger("gangmesh")


@with_keywords(LayoutKeywords, LAYOUT_DEFAULTS)
def create_gangs(
    root_gang: Gang,
    *,
    timeout: timedelta | None = None,
    placement: bool | Sequence[Site] | None = None,
    replicas: Replicas | None = None,
    **keywords: Unpack[LayoutKeywords],
) -> Gangs:
    """Build every parallel gang of ``root_gang`` and the DeviceMeshes they come from.

    The dense mesh has the dimensions pp, dp_replicate, dp_shard, cp and tp,
    outermost first unless ``order`` says otherwise; ``Gangs.meshes`` adds meshes
    with dimensions merged ("dp_shard_cp", "dp_cp", "dp"), the expert mesh ("pp",
    "dp_replicate", "efsdp", "ep", "etp") and "edp" over the same processes (where
    the job uses experts: ep or etp above 1, or ``expert``), all over the gangs'
    groups. Exactly one size may be -1 (inferred). With ``placement`` the mesh is
    laid over the ranks so that its innermost dimensions stay inside a host, then an
    NVLink domain, then a rack, whatever order the launcher numbered them in (see
    :mod:`gangmesh.plan.placement`); ``gangs.plan`` knows the permutation. ``timeout``
    (default: the root gang's) is the timeout of every group created; the root's
    ``monitored`` and ``high_priority`` reach every gang. Gangs with the same
    members share one communicator; a dimension of size 1 has none.

    Every process of the root gang calls it with the same arguments. With a
    FakeGang root of size N it returns the FakeGangs of the plan instead.

    :param root_gang: the gang of every process, from :func:`setup_root_gang`.
    :param pp: pipeline parallel size (stages).
    :param dp_replicate: replicated data parallel size (the replicas of HSDP).
    :param dp_shard: sharded data parallel size (FSDP); -1 infers it.
    :param cp: context parallel size.
    :param tp: tensor parallel size.
    :param ep: expert parallel size.
    :param etp: tensor parallel size of the experts: 1 or ``tp``.
    :param order: the dense dimensions, outermost first, as a sequence or a
        comma-separated string.
    :param expert: build the expert gangs and meshes at ep = 1 and etp = 1 too, for a
        mixture of experts without expert parallelism (efsdp = dp_shard x cp x tp, edp).
        Without it (and with ep = etp = 1) ``gangs.efsdp`` and ``gangs.edp`` are
        stand-ins that raise on use (UnbuiltGang), and no expert mesh is made.
    :param timeout: timeout of every group created; default: the root gang's.
    :param placement: True: every process reports its site
        (:func:`gangmesh.plan.placement.this_site`: ``GANGMESH_HOST`` or the hostname, and
        ``GANGMESH_DOMAIN``, ``GANGMESH_RACK``, ``SLURM_TOPOLOGY_ADDR``) in one
        all_gather on the root gang before any group is created; a sequence: the
        :class:`~gangmesh.plan.cluster.Site` of each global rank, the same on every
        process; None or False: ranks keep the launcher's numbering.
    :param replicas: this launch's place among replica groups (:func:`~gangmesh.join_replicas`):
        ``gangs.rdp`` is then the managed gang over the step's replica groups, and the sizes
        are those of one group (``dp_replicate`` 1); the rest is as for any job.
    :raises ValueError: sizes that do not multiply to ``root_gang.size``, a rule of
        the expert view broken, a root gang that is not the default group's (another
        gang, a closed one, one of another world), or ``dp_replicate`` other than 1 with
        ``replicas``.
    :raises GangError: a process group cannot be created.
    """
    check_root(root_gang, parts=True)
    if replicas is not None:
        _check_replicas(replicas, keywords.get("dp_replicate", 1))
    try:
        layout = Layout(**keywords)
    except ValueError as ex:
        # Peers learn of the request that failed here instead of waiting for it.
        others = {"timeout": timeout, "placement": placement_request(placement)}
        asked = {**LAYOUT_DEFAULTS, **keywords}
        LayoutAgreement(root_gang, asked, **others).leave_request()
        raise _with_hint(ex, root_gang.size, _wanted(asked[name] for name in DENSE_DIMS)) from None
    return _create(root_gang, layout, timeout, placement, replicas)


def _check_replicas(replicas: object, dp_replicate: object) -> None:
    """The ``replicas`` argument: a Replicas, with a layout of one replica group."""
    if not isinstance(replicas, Replicas):
        raise InvalidTypeError(
            f"replicas: expected a Replicas from join_replicas, got {type(replicas).__name__}"
        )
    if dp_replicate != 1:
        raise ValueError(
            f"dp_replicate: expected 1 with replicas= (the replica groups are the replicate "
            f"dimension; the sizes are those of one group), got {dp_replicate}"
        )


def create_gangs_from_layout(
    root_gang: Gang,
    layout: Layout,
    *,
    timeout: timedelta | None = None,
    placement: bool | Sequence[Site] | None = None,
    replicas: Replicas | None = None,
) -> Gangs:
    """Build the gangs of a checked :class:`~gangmesh.plan.layout.Layout`.

    As :func:`~gangmesh.create_gangs` builds those of its sizes and order, without
    checking the layout again.

    :param root_gang: the gang of every process, from :func:`~gangmesh.setup_root_gang`.
    :param layout: the sizes and order asked for.
    :param timeout: timeout of every group created; default: the root gang's.
    :param placement: as :func:`~gangmesh.create_gangs` takes it.
    :param replicas: as :func:`~gangmesh.create_gangs` takes it.
    :raises ValueError: as :func:`~gangmesh.create_gangs` does.
    :raises GangError: a process group cannot be created.
    """
    check_root(root_gang, parts=True)
    if replicas is not None:
        _check_replicas(replicas, layout.dp_replicate)
    return _create(root_gang, layout, timeout, placement, replicas)


def _create(
    root_gang: Gang,
    layout: Layout,
    timeout: timedelta | None,
    placement: bool | Sequence[Site] | None,
    replicas: Replicas | None = None,
) -> Gangs:
    """The gangs of ``layout`` over a checked root gang, once every process asked for it;
    with ``replicas``, their rdp is the managed gang across replica groups."""
    gangs = _created(root_gang, layout, timeout, placement)
    if replicas is None:
        return gangs
    replicas.adopt(gangs.plan)
    return gangs._managed(replicas.gang)


def _created(
    root_gang: Gang,
    layout: Layout,
    timeout: timedelta | None,
    placement: bool | Sequence[Site] | None,
) -> Gangs:
    """The gangs of ``layout`` over a checked root gang, once every process asked for it."""
    agreeing = LayoutAgreement(
        root_gang, layout, timeout=timeout, placement=placement_request(placement)
    )
    try:
        plan = _plan(root_gang.size, layout)
        timeout = check_timeout(timeout)
        sites = given_sites(placement, root_gang.size)
    except ValueError:
        agreeing.leave_request()
        raise
    if not isinstance(root_gang, ProcessGroupGang):
        plan = place(plan, sites) if sites else plan
        return Gangs._of(root_gang, plan, mesh_build.fake_gangs(root_gang, plan), timeout)
    timeout = timeout or root_gang.timeout or DEFAULT_TIMEOUT
    agreeing.wait(timeout)
    if placement is True:
        sites = all_gather_objects(root_gang, this_site())
    if sites:
        plan = place(plan, sites)
        log.info("Placing %s by where its ranks run", plan)
    log.info("Creating gangs %s", plan)
    return Gangs._of(root_gang, plan, mesh_build.build(root_gang, plan, timeout), timeout)


def _plan(world_size: int, layout: Layout) -> MeshTopology:
    """The plan; in a job of one process a failure says how to start more."""
    try:
        return MeshTopology.from_layout(world_size, layout)
    except ValueError as ex:
        wanted = _wanted(layout.size(name) for name in DENSE_DIMS)
        raise _with_hint(ex, world_size, wanted) from None


def _wanted(dense: Iterable[object]) -> int:
    """The processes that the dense sizes asked for need (a -1 left out)."""
    return math.prod(size for size in dense if isinstance(size, int) and size > 1)


def _with_hint(error: ValueError, world_size: int, wanted: int) -> ValueError:
    """``error``, saying how to start ``wanted`` processes where the job has one."""
    if world_size == 1 and wanted > 1:
        return ValueError(
            f"{error}; this job has one process: run it under torchrun --nproc-per-node "
            f"{wanted} (or srun -n {wanted})"
        )
    return error


def create_parallel_gangs(root_gang: Gang, *, tp_size: int = 1) -> Gangs:
    """Data and tensor parallel gangs: tp groups of ``tp_size`` adjacent ranks.

    For 8 processes and ``tp_size=2``: tp [0,1] [2,3] [4,5] [6,7] and dp
    [0,2,4,6] [1,3,5,7]. Data parallelism is replicated (rdp = dp, sdp of size
    1) until :func:`create_fsdp_gangs` splits it.

    :param root_gang: the gang of every process.
    :param tp_size: the tensor parallel size.
    :raises ValueError: ``tp_size`` is not a positive factor of the root size
        (in a job of one process, saying how to start more).
    """
    tp_size = check_positive("tp_size", tp_size)
    if root_gang.size % tp_size:
        error = ValueError(
            f"tp_size: expected a factor of root_gang.size ({root_gang.size}), got {tp_size}"
        )
        raise _with_hint(error, root_gang.size, tp_size)
    return create_gangs(root_gang, dp_replicate=-1, dp_shard=1, tp=tp_size)


def create_fsdp_gangs(gangs: Gangs, intra_node_size: int | None = None) -> Gangs:
    """Split the data parallel gang for FSDP (no ``intra_node_size``) or HSDP.

    Without ``intra_node_size``: sdp = dp and rdp has size 1 (fully sharded).
    With it: sdp groups of ``intra_node_size`` consecutive dp ranks, rdp groups
    strided by it; for 8 processes and 4: sdp [0,1,2,3] [4,5,6,7], rdp [0,4]
    [1,5] [2,6] [3,7]. Gangs that placement laid out are placed again, over the same
    sites. Works with any tp size, on gloo and NCCL. Returns new
    Gangs; tp, pp, cp and the expert layout keep theirs, and share the groups of
    ``gangs`` where the members are the same.

    :param gangs: the gangs to split the data parallel gang of.
    :param intra_node_size: the sharded (sdp) size for HSDP; None for FSDP.
    :raises ValueError: ``intra_node_size`` does not divide ``gangs.dp.size``
        (in a job of one process, saying how to start more).
    """
    if not isinstance(gangs, Gangs):
        raise InvalidTypeError(f"gangs: expected Gangs, got {type(gangs).__name__}")
    dp_size = gangs.dp.size
    if intra_node_size is None:
        replicate, shard = 1, dp_size
    else:
        shard = check_positive("intra_node_size", intra_node_size)
        if dp_size % shard:
            error = ValueError(
                f"intra_node_size: expected a factor of gangs.dp.size ({dp_size}), got {shard}"
            )
            raise _with_hint(error, gangs.root.size, shard)
        replicate = dp_size // shard
    layout = dataclasses.replace(gangs.plan.layout, dp_replicate=replicate, dp_shard=shard)
    sites = list(gangs.plan.sites) or None
    return create_gangs_from_layout(gangs.root, layout, timeout=gangs.timeout, placement=sites)


def create_fake_gangs(device: torch.device) -> Gangs:
    """Gangs of one process (FakeGangs of size 1) on ``device``.

    :param device: where the tensors passed to the collectives live.
    """
    gang = FakeGang(device)
    return Gangs(root=gang, dp=gang, rdp=gang, sdp=gang, tp=gang, pp=gang)
