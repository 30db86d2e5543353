"""Gangs: one gang per parallel dimension of a plan, built over DeviceMeshes."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterator, Mapping
from datetime import timedelta
from types import TracebackType
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

from gangmesh import mesh_build
from gangmesh._checks import InvalidTypeError, check_positive
from gangmesh._exit import release_at_exit
from gangmesh.communicators import CommunicatorInfo, Lease, created_by_gangmesh
from gangmesh.fake_gang import FakeGang
from gangmesh.gang import DEFAULT_TIMEOUT, Gang
from gangmesh.mesh_read import read_meshes
from gangmesh.mesh_views import Meshes
from gangmesh.process_group_gang import ProcessGroupGang
from gangmesh.rendezvous import LayoutAgreement
from gangmesh.topology import (
    ALIASES,
    GANG_NAMES,
    MeshTopology,
)

log = logging.getLogger("gangmesh")


class Gangs:
    """The gangs of one process: the root, and one gang per dimension of its plan.

    ``meshes`` maps a name to a DeviceMesh built over the gangs' own groups, one
    per use (torchtitan's names in brackets): "dense" (``plan.order``: pp,
    dp_replicate, dp_shard, cp, tp); "dp_shard_cp" ("fsdp": pp, dp_replicate,
    dp_shard_cp, tp), for FSDP2 (``["dp_replicate", "dp_shard_cp"]``) and tensor
    parallelism (``["tp"]``) on one root; "dp_cp" ("loss": pp, dp_cp, tp), every
    data dimension for the loss; "dp" ("batch": pp, dp, cp, tp), for data loading;
    "expert" (pp, dp_replicate, efsdp, ep, etp) and "edp" (pp, edp, ep, etp), at
    every ep (at ep = 1 the ep dimension has size 1). ``mesh`` is ``meshes["dense"]`` and
    ``expert_mesh`` ``meshes["expert"]`` (None where absent). Fake gangs have no
    meshes; :meth:`from_mesh` keeps the user's meshes as "dense" and "expert".
    Built directly from gangs, without the expert ones, a Gangs takes the dense
    gangs of the same members: etp = tp, efsdp = sdp, edp = dp (ep = 1, cp = 1).
    Used as a context manager, a Gangs becomes the calling thread's current gangs
    (see :func:`maybe_get_current_gangs`).

    :param mesh: the dense mesh, kept as ``meshes["dense"]``.
    :param expert_mesh: the expert mesh, kept as ``meshes["expert"]``.
    :raises ValueError: root rank 0 is not rank 0 of every gang, the gang sizes
        do not multiply to the root size, or expert gangs are missing where cp > 1.
    """

    __slots__ = (
        "__weakref__",
        "_closed",
        "_gangs",
        "_leases",
        "cp",
        "dp",
        "edp",
        "efsdp",
        "ep",
        "etp",
        "meshes",
        "plan",
        "pp",
        "rdp",
        "root",
        "sdp",
        "timeout",
        "tp",
    )

    root: Gang
    """Every process of the job."""
    dp: Gang
    """Data parallel: dp_replicate x dp_shard flattened."""
    rdp: Gang
    """Replicated data parallel (dp_replicate): the replicas of HSDP."""
    sdp: Gang
    """Sharded data parallel (dp_shard): the shards of FSDP."""
    tp: Gang
    """Tensor parallel."""
    pp: Gang
    """Pipeline parallel: the stages."""
    cp: Gang
    """Context parallel."""
    ep: Gang
    """Expert parallel (size 1 without expert parallelism)."""
    efsdp: Gang
    """Sharded data parallel of the expert weights."""
    etp: Gang
    """Tensor parallel of the expert weights."""
    edp: Gang
    """Expert data parallel: dp_replicate x efsdp flattened."""
    plan: MeshTopology
    """The layout these gangs were built from."""
    meshes: Meshes
    """Mesh name -> DeviceMesh over these gangs' groups (see the class docstring)."""
    timeout: timedelta | None
    """Timeout of the groups these gangs created."""

    def __init__(
        self,
        *,
        root: Gang,
        dp: Gang,
        rdp: Gang,
        sdp: Gang,
        tp: Gang,
        pp: Gang,
        cp: Gang | None = None,
        ep: Gang | None = None,
        efsdp: Gang | None = None,
        etp: Gang | None = None,
        edp: Gang | None = None,
        plan: MeshTopology | None = None,
        mesh: DeviceMesh | None = None,
        expert_mesh: DeviceMesh | None = None,
        timeout: timedelta | None = None,
        meshes: Mapping[str, DeviceMesh] | None = None,
    ) -> None:
        def one(gang: Gang | None) -> Gang:
            return gang if gang is not None else FakeGang(root.device)

        self.root = root
        self.dp, self.rdp, self.sdp, self.tp, self.pp = dp, rdp, sdp, tp, pp
        self.cp, self.ep = one(cp), one(ep)
        gangs = {"dp": dp, "rdp": rdp, "sdp": sdp, "tp": tp, "pp": pp, "cp": self.cp, "ep": ep,
                 "efsdp": efsdp, "etp": etp, "edp": edp}  # fmt: skip
        off = [name for name, gang in gangs.items() if gang is not None and gang.rank != 0]
        if root.rank == 0 and off:
            raise ValueError(
                f"{', '.join(off)}: root rank 0 must be rank 0 of every gang, but its rank "
                f"there is {', '.join(str(gangs[name].rank) for name in off)}"  # type: ignore[union-attr]
            )
        if (efsdp is None or edp is None) and self.cp.size > 1:
            raise ValueError(
                f"efsdp, edp: expected the expert gangs when cp={self.cp.size} > 1 (efsdp "
                f"spans dp_shard x cp, which no dense gang holds), got none"
            )
        self.efsdp = sdp if efsdp is None else efsdp
        self.etp = tp if etp is None else etp
        self.edp = dp if edp is None else edp
        self.plan = plan or MeshTopology(
            root.size, pp=pp.size, dp_replicate=rdp.size, dp_shard=sdp.size, cp=self.cp.size,
            tp=tp.size, ep=self.ep.size, etp=self.etp.size,
        )  # fmt: skip
        given = {"dense": mesh, "expert": expert_mesh}
        self.meshes = Meshes(
            {**(meshes or {}), **{name: m for name, m in given.items() if m is not None}}
        )
        if self.meshes:
            release_at_exit(self)
        self.timeout = timeout
        self._gangs: dict[str, Gang] = {
            "dp_replicate": rdp,
            "dp_shard": sdp,
            **{
                name: getattr(self, name)
                for name in GANG_NAMES
                if name not in ALIASES or name in ("dp", "edp")
            },
        }
        self._leases: list[Lease] = []
        self._closed = False

    def _release(self) -> None:
        """Drop the meshes (they hold torch's groups); for the exit teardown only."""
        self.meshes = Meshes({})

    @property
    def mesh(self) -> DeviceMesh | None:
        """The dense DeviceMesh, ``meshes["dense"]``; None for fake gangs."""
        return self.meshes.get("dense")

    @property
    def expert_mesh(self) -> DeviceMesh | None:
        """The expert DeviceMesh, ``meshes["expert"]``; None without an expert view or fake."""
        return self.meshes.get("expert")

    @classmethod
    def _of(
        cls, root: Gang, plan: MeshTopology, built: mesh_build.Built, timeout: timedelta | None
    ) -> Gangs:
        g = built.gangs
        gangs = cls(
            root=root, dp=g["dp"], rdp=g["dp_replicate"], sdp=g["dp_shard"], tp=g["tp"],
            pp=g["pp"], cp=g["cp"], ep=g["ep"], efsdp=g["efsdp"], etp=g["etp"], edp=g["edp"],
            plan=plan, timeout=timeout, meshes=built.meshes,
        )  # fmt: skip
        gangs._gangs.update(g)
        gangs._leases = built.leases
        return gangs

    def __getitem__(self, name: str) -> Gang:
        """The gang of a dimension or alias: ``gangs["dp_shard"] is gangs.sdp``.

        :raises ValueError: an unknown name, or one this Gangs was built without.
        """
        if name == "root":
            return self.root
        canonical = ALIASES[name][0] if name in ALIASES and len(ALIASES[name]) == 1 else name
        gang = self._gangs.get(canonical)
        if gang is None:
            known = ", ".join(["root", *self._gangs, *(a for a in ALIASES if len(ALIASES[a]) == 1)])
            raise ValueError(f"name: expected one of {known}, got {name!r}")
        return gang

    def items(self) -> Iterator[tuple[str, Gang]]:
        """(name, gang) for every parallel gang field, root excluded."""
        for name in GANG_NAMES:
            yield name, getattr(self, name)

    def communicators(self) -> list[CommunicatorInfo]:
        """The communicators this process's gangs use, one per distinct group, root's included.

        Gangs of size 1 have none. Closed gangs are left out.
        """
        found: dict[int, tuple[ProcessGroupGang, list[str]]] = {}
        for name, gang in [("root", self.root), *self._gangs.items()]:
            if isinstance(gang, ProcessGroupGang) and gang.size > 1 and gang._pg is not None:
                group = gang.as_process_group()
                found.setdefault(id(group), (gang, []))[1].append(name)
        return sorted(
            (
                CommunicatorInfo(
                    ranks=tuple(gang.global_ranks),
                    gangs=tuple(names),
                    backend=dist.get_backend(gang.as_process_group()),
                    timeout=gang.timeout,
                    created=created_by_gangmesh(gang.as_process_group()),
                )
                for gang, names in found.values()
            ),
            key=lambda info: (len(info.ranks), info.ranks),
        )

    def __repr__(self) -> str:
        rank = self.root.rank
        parts = [
            f"{name} {gang.rank}/{gang.size} {_short(self.plan.group_of(rank, name))}"
            for name, gang in self.items()
            if gang.size > 1
        ]
        lone = [name for name, gang in self.items() if gang.size == 1]
        if lone:
            parts.append(f"size 1: {', '.join(lone)}")
        return f"Gangs(rank {rank} of {self.root.size}: {'; '.join(parts)})"

    def __enter__(self) -> Gangs:
        _current_stack().append(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        stack = _current_stack()
        if stack and stack[-1] is self:
            stack.pop()

    def close(self) -> None:
        """Close the gangs and groups these Gangs created; later calls do nothing.

        The root gang, groups of a mesh given to :meth:`from_mesh`, and groups that
        another Gangs still uses stay intact. Communicates with no peer.
        """
        if self._closed:
            return
        self._closed = True
        mesh_build.release(mesh_build.Built(self._gangs, leases=self._leases))

    @classmethod
    def from_mesh(
        cls,
        mesh: DeviceMesh,
        *,
        root: Gang | None = None,
        timeout: timedelta | None = None,
        expert_mesh: DeviceMesh | None = None,
    ) -> Gangs:
        """Wrap DeviceMeshes a user built; their groups are never destroyed by gangmesh.

        ``mesh`` has dimension names among pp, dp_replicate, dp_shard, cp and tp,
        in any order (a single data dimension may be named "dp": fully sharded);
        missing dimensions have size 1. ``expert_mesh`` (names among pp,
        dp_replicate, efsdp, ep, etp) adds the expert gangs. Both must number
        ranks row-major, as :func:`~torch.distributed.device_mesh.init_device_mesh`
        does. The plan is derived once from
        them; the meshes are kept as they are (gangmesh adds no flattened
        dimension to them: ``gangs.dp`` is a gang of its own) as ``meshes["dense"]``
        and ``meshes["expert"]``; the other meshes are built over the same groups
        and the flattened ones gangmesh creates. ``root`` defaults
        to the default process group; ``timeout`` (default: the root's) is that
        of the flattened groups gangmesh creates.

        :param mesh: the dense mesh.
        :param root: the gang of every process; default: the default process group's.
        :param timeout: timeout of the flattened groups gangmesh creates.
        :param expert_mesh: the expert mesh, if the user has one; without it,
            gangmesh creates the expert gangs' groups.
        :raises ValueError: unknown or missing dimension names, a mesh that does not
            cover the root or is not numbered row-major, an expert mesh that does
            not fit the dense one.
        """
        if not isinstance(mesh, DeviceMesh):
            raise InvalidTypeError(f"mesh: expected a DeviceMesh, got {type(mesh).__name__}")
        if expert_mesh is not None and not isinstance(expert_mesh, DeviceMesh):
            raise InvalidTypeError(
                f"expert_mesh: expected a DeviceMesh or None, got {type(expert_mesh).__name__}"
            )
        plan, groups = read_meshes(mesh, expert_mesh)
        device = _mesh_device(mesh)
        if root is None:
            world = dist.group.WORLD
            assert isinstance(world, dist.ProcessGroup)
            root = ProcessGroupGang(world, device, name="root")
        if root.size != mesh.size():
            raise ValueError(
                f"mesh: expected a mesh over all {root.size} processes of root, got {mesh.size()}"
            )
        if not isinstance(root, ProcessGroupGang):
            raise InvalidTypeError(f"root: expected a ProcessGroupGang, got {root.describe()}")
        timeout = _check_timeout(timeout) or root.timeout
        built = mesh_build.wrap(root, plan, groups, timeout)
        built.meshes["dense"] = mesh
        if expert_mesh is not None:
            built.meshes["expert"] = expert_mesh
        return cls._of(root, plan, built, timeout)


def _mesh_device(mesh: DeviceMesh) -> torch.device:
    if mesh.device_type == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device(mesh.device_type)


def _check_timeout(timeout: object) -> timedelta | None:
    if timeout is not None and not (isinstance(timeout, timedelta) and timeout > timedelta(0)):
        raise ValueError(f"timeout: expected a positive datetime.timedelta, got {timeout!r}")
    return timeout


def create_gangs(
    root_gang: Gang,
    *,
    pp: int = 1,
    dp_replicate: int = 1,
    dp_shard: int = -1,
    cp: int = 1,
    tp: int = 1,
    ep: int = 1,
    etp: int = 1,
    order: str | tuple[str, ...] | list[str] | None = None,
    timeout: timedelta | None = None,
) -> Gangs:
    """Build every parallel gang of ``root_gang`` and the DeviceMeshes they come from.

    The dense mesh has the dimensions pp, dp_replicate, dp_shard, cp and tp,
    outermost first unless ``order`` says otherwise; ``Gangs.meshes`` adds meshes
    with dimensions merged ("dp_shard_cp", "dp_cp", "dp"), the expert mesh ("pp",
    "dp_replicate", "efsdp", "ep", "etp") and "edp" over the same processes (at
    ep = 1 too), all over the gangs' groups. Exactly one size may be
    -1 (inferred). ``timeout``
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
    :param timeout: timeout of every group created; default: the root gang's.
    :raises ValueError: sizes that do not multiply to ``root_gang.size``, a rule of
        the expert view broken, or a root gang that is not the default group's.
    :raises GangError: a process group cannot be created.
    """
    if not isinstance(root_gang, Gang):
        raise InvalidTypeError(f"root_gang: expected a Gang, got {type(root_gang).__name__}")
    if root_gang.supports_process_group and (
        not isinstance(root_gang, ProcessGroupGang)
        or root_gang.as_process_group() is not dist.group.WORLD
    ):
        raise ValueError(
            f"root_gang: expected the gang of the default process group "
            f"(size {dist.get_world_size()}), got {root_gang.describe()}"
        )
    sizes = {"pp": pp, "dp_replicate": dp_replicate, "dp_shard": dp_shard, "cp": cp, "tp": tp}
    request = {**sizes, "ep": ep, "etp": etp, "order": order, "timeout": timeout}
    agreeing = LayoutAgreement(root_gang, request)
    try:
        plan = _plan(root_gang.size, sizes, ep, etp, order)
        timeout = _check_timeout(timeout)
    except ValueError:
        agreeing.leave_request()
        raise
    if not isinstance(root_gang, ProcessGroupGang):
        return Gangs._of(root_gang, plan, mesh_build.fake_gangs(root_gang, plan), timeout)
    timeout = timeout or root_gang.timeout or DEFAULT_TIMEOUT
    agreeing.wait(timeout)
    log.info("Creating gangs %s", plan)
    return Gangs._of(root_gang, plan, mesh_build.build(root_gang, plan, timeout), timeout)


def _plan(world_size: int, sizes: dict[str, Any], ep: Any, etp: Any, order: Any) -> MeshTopology:
    """The plan; in a job of one process a failure says how to start more."""
    try:
        return MeshTopology(world_size, **sizes, ep=ep, etp=etp, order=order)
    except ValueError as ex:
        wanted = math.prod(v for v in sizes.values() if isinstance(v, int) and v > 1)
        if world_size == 1 and wanted > 1:
            raise ValueError(
                f"{ex}; this job has one process: run it under torchrun --nproc-per-node "
                f"{wanted} (or srun -n {wanted})"
            ) from None
        raise


def create_parallel_gangs(root_gang: Gang, *, tp_size: int = 1) -> Gangs:
    """Data and tensor parallel gangs: tp groups of ``tp_size`` adjacent ranks.

    For 8 processes and ``tp_size=2``: tp [0,1] [2,3] [4,5] [6,7] and dp
    [0,2,4,6] [1,3,5,7]. Data parallelism is replicated (rdp = dp, sdp of size
    1) until :func:`create_fsdp_gangs` splits it.

    :param root_gang: the gang of every process.
    :param tp_size: the tensor parallel size.
    :raises ValueError: ``tp_size`` is not a positive factor of the root size.
    """
    tp_size = check_positive("tp_size", tp_size)
    if root_gang.size % tp_size:
        raise ValueError(
            f"tp_size: expected a factor of root_gang.size ({root_gang.size}), got {tp_size}"
        )
    return create_gangs(root_gang, dp_replicate=-1, dp_shard=1, tp=tp_size)


def create_fsdp_gangs(gangs: Gangs, intra_node_size: int | None = None) -> Gangs:
    """Split the data parallel gang for FSDP (no ``intra_node_size``) or HSDP.

    Without ``intra_node_size``: sdp = dp and rdp has size 1 (fully sharded).
    With it: sdp groups of ``intra_node_size`` consecutive dp ranks, rdp groups
    strided by it; for 8 processes and 4: sdp [0,1,2,3] [4,5,6,7], rdp [0,4]
    [1,5] [2,6] [3,7]. Works with any tp size, on gloo and NCCL. Returns new
    Gangs; tp, pp, cp and the expert layout keep theirs, and share the groups of
    ``gangs`` where the members are the same.

    :param gangs: the gangs to split the data parallel gang of.
    :param intra_node_size: the sharded (sdp) size for HSDP; None for FSDP.
    :raises ValueError: ``intra_node_size`` does not divide ``gangs.dp.size``.
    """
    dp_size = gangs.dp.size
    if intra_node_size is None:
        replicate, shard = 1, dp_size
    else:
        shard = check_positive("intra_node_size", intra_node_size)
        if dp_size % shard:
            raise ValueError(
                f"intra_node_size: expected a factor of gangs.dp.size ({dp_size}), got {shard}"
            )
        replicate = dp_size // shard
    sizes = gangs.plan.sizes()
    return create_gangs(
        gangs.root,
        pp=sizes["pp"],
        dp_replicate=replicate,
        dp_shard=shard,
        cp=sizes["cp"],
        tp=sizes["tp"],
        ep=sizes["ep"],
        etp=sizes["etp"],
        order=gangs.plan.order,
        timeout=gangs.timeout,
    )


def create_fake_gangs(device: torch.device) -> Gangs:
    """Gangs of one process (FakeGangs of size 1) on ``device``.

    :param device: where the tensors passed to the collectives live.
    """
    gang = FakeGang(device)
    return Gangs(root=gang, dp=gang, rdp=gang, sdp=gang, tp=gang, pp=gang)


_local = threading.local()


def _current_stack() -> list[Gangs]:
    stack: list[Gangs] | None = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def maybe_get_current_gangs() -> Gangs | None:
    """The innermost Gangs entered with ``with gangs:`` in this thread, or None."""
    stack = _current_stack()
    return stack[-1] if stack else None


def _short(group: list[int], limit: int = 8) -> str:
    if len(group) <= limit:
        return "[" + ",".join(map(str, group)) + "]"
    return "[" + ",".join(map(str, group[: limit - 1])) + f",...,{group[-1]}]"


setup_parallel_gangs = create_parallel_gangs
setup_hybrid_fsdp_gangs = create_fsdp_gangs
