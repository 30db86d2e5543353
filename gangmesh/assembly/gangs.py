"""Gangs: one gang per parallel dimension of a plan, by name, over DeviceMeshes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn, overload

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from typing_extensions import Unpack, final, override

from gangmesh.assembly import mesh_build, record
from gangmesh.assembly.hand_built import GANG_DEFAULTS, GangKeywords, completed, keywords_of
from gangmesh.assembly.mesh_views import Meshes
from gangmesh.assembly.mesh_wrap import wrap_meshes
from gangmesh.assembly.thread_stack import DeviceStack
from gangmesh.plan.dim_keywords import with_keywords
from gangmesh.plan.dims import ALIASES, FLATTENED, GANG_DIMS, GANG_NAMES, ROOT, Dim
from gangmesh.plan.topology import MeshTopology
from gangmesh.plan.view import short_group
from gangmesh.runtime import faults
from gangmesh.runtime._exit import release_at_exit
from gangmesh.runtime.communicators import CommunicatorInfo, Lease, created_by_gangmesh
from gangmesh.runtime.gang import Gang, GangError
from gangmesh.runtime.managed_gang import ManagedGang
from gangmesh.runtime.process_group_gang import ProcessGroupGang
from gangmesh.runtime.unbuilt_gang import UnbuiltGang

_STORED = (*FLATTENED[Dim.DP], *(dim for dim in GANG_DIMS if dim not in FLATTENED[Dim.DP]))
"""The dimensions of GANG_DIMS in the order their gangs are reported, HSDP's two first."""


class _Field:
    """A read-only Gangs attribute: the gang stored under a dimension name."""

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc
        self.name = self.key = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.key = name, _canonical(name)

    @overload
    def __get__(self, gangs: None, owner: type) -> _Field: ...

    @overload
    def __get__(self, gangs: Gangs, owner: type) -> Gang: ...

    def __get__(self, gangs: Gangs | None, owner: type) -> _Field | Gang:
        return self if gangs is None else gangs._gangs[self.key]

    def __set__(self, gangs: Gangs, value: object) -> NoReturn:
        raise AttributeError(f"{self.name}: the gangs of a Gangs are read-only")


def _canonical(name: str) -> str:
    """The dimension a name stands for: "rdp" -> "dp_replicate"; other names as they are."""
    targets = ALIASES.get(name, ())
    return targets[0] if len(targets) == 1 else name


@final
class Gangs(Mapping[str, Gang]):
    """The gangs of one process: the root, and one gang per dimension of its plan.

    A Gangs is a read-only mapping from name to Gang. Iterating it (``keys``,
    ``values``, ``items``, ``len``) gives the parallel gangs built, in the order of
    the attributes below, root excluded (a dense job, ep = etp = 1 without
    ``expert=True``, builds no efsdp and edp: those attributes hold stand-ins that raise
    on use, saying how to build them); ``gangs[name]``, ``name in gangs`` and
    ``gangs.get(name)`` also take "root", each dimension's full name ("dp_shard"
    for ``sdp``) and the flattened dimensions built ("dp_shard_cp", "dp_cp").

    ``meshes`` maps a name to a DeviceMesh built over the gangs' own groups, one
    per use (torchtitan's names in brackets): "dense" (``plan.order``: pp,
    dp_replicate, dp_shard, cp, tp); "dp_shard_cp" ("fsdp": pp, dp_replicate,
    dp_shard_cp, tp), for FSDP2 (``["dp_replicate", "dp_shard_cp"]``) and tensor
    parallelism (``["tp"]``) on one root; "dp_cp" ("loss": pp, dp_cp, tp), every
    data dimension for the loss; "dp" ("batch": pp, dp, cp, tp), for data loading;
    "expert" ("efsdp": pp, dp_replicate, efsdp, ep, etp) and "edp" (pp, edp, ep, etp),
    where the job uses experts (at ep = 1 with ``expert=True``, the ep dimension of size 1).
    Under torchtitan's names, the merged dimension has torchtitan's name too
    (``meshes["fsdp"]["dp_replicate", "fsdp"]``): a mesh over the same groups, made on first
    use.
    ``mesh`` is ``meshes["dense"]`` and ``expert_mesh`` ``meshes["expert"]`` (None where
    absent). Fake gangs have no
    meshes; :meth:`from_mesh` keeps the user's meshes as "dense" and "expert".
    Built directly from gangs, without the expert ones, a Gangs takes the dense
    gangs of the same members: ep of size 1, etp = tp, efsdp = sdp, edp = dp
    (cp = 1), each only where the plan has that size.
    Used as a context manager, a Gangs becomes the calling thread's current gangs
    for its device (see :func:`maybe_get_current_gangs`). Two Gangs are equal only if they are
    the same object.

    :param mesh: the dense mesh, kept as ``meshes["dense"]``.
    :param expert_mesh: the expert mesh, kept as ``meshes["expert"]``.
    :raises ValueError: root rank 0 is not rank 0 of every gang, the gang sizes
        do not multiply to the root size, expert gangs are missing where cp > 1, or
        an expert gang (given, or its dense default) is not of the plan's size.
    """

    __slots__ = ("__weakref__", "_closed", "_gangs", "_leases", "meshes", "plan", "timeout")

    root = _Field("Every process of the job.")
    dp = _Field("Data parallel: dp_replicate x dp_shard flattened.")
    rdp = _Field("Replicated data parallel (dp_replicate): the replicas of HSDP.")
    sdp = _Field("Sharded data parallel (dp_shard): the shards of FSDP.")
    tp = _Field("Tensor parallel.")
    pp = _Field("Pipeline parallel: the stages.")
    cp = _Field("Context parallel.")
    ep = _Field("Expert parallel (size 1 without expert parallelism).")
    efsdp = _Field("Sharded data parallel of the expert weights.")
    etp = _Field("Tensor parallel of the expert weights.")
    edp = _Field("Expert data parallel: dp_replicate x efsdp flattened.")
    plan: MeshTopology
    """The layout these gangs were built from."""
    meshes: Meshes
    """Mesh name -> DeviceMesh over these gangs' groups (see the class docstring)."""
    timeout: timedelta | None
    """Timeout of the groups these gangs created."""

    @with_keywords(GangKeywords, GANG_DEFAULTS)
    def __init__(
        self,
        *,
        plan: MeshTopology | None = None,
        mesh: DeviceMesh | None = None,
        expert_mesh: DeviceMesh | None = None,
        timeout: timedelta | None = None,
        meshes: Mapping[str, DeviceMesh] | None = None,
        **gangs: Unpack[GangKeywords],
    ) -> None:
        by_dim, plan = completed(gangs, plan)
        given_meshes = {"dense": mesh, "expert": expert_mesh}
        meshes = {**(meshes or {}), **{k: m for k, m in given_meshes.items() if m is not None}}
        self._gangs: dict[str, Gang] = {ROOT: gangs["root"], **{n: by_dim[n] for n in _STORED}}
        self.plan, self.meshes, self.timeout = plan, Meshes(meshes, self), timeout
        self._leases: list[Lease] = []
        self._closed = False
        if meshes:
            release_at_exit(self)

    @classmethod
    def _of(
        cls, root: Gang, plan: MeshTopology, built: mesh_build.Built, timeout: timedelta | None
    ) -> Gangs:
        """The Gangs of what :mod:`gangmesh.assembly.mesh_build` built for ``plan``, made as
        one is made by hand; it holds the flattened gangs and the meshes' leases besides."""
        keywords = keywords_of(root, built.gangs)
        gangs = cls(**keywords, plan=plan, meshes=built.meshes, timeout=timeout)
        gangs._gangs.update(built.gangs)
        gangs._leases.extend(built.leases)
        return gangs

    def _managed(self, replica_groups: Gang) -> Gangs:
        """These gangs with ``replica_groups``, the managed gang across replica groups
        (:func:`~gangmesh.join_replicas`), as rdp; the plan is that of one group."""
        self._gangs[Dim.DP_REPLICATE] = replica_groups
        return self

    @override
    def __getitem__(self, name: str) -> Gang:
        """The gang of a dimension or alias: ``gangs["dp_shard"] is gangs.sdp``.

        :raises KeyError: a name this Gangs has no gang of, naming the ones it has.
        """
        gang = self._gangs.get(_canonical(name))
        if gang is None:
            known = ", ".join([*self._gangs, *(a for a in ALIASES if _canonical(a) != a)])
            raise KeyError(f"gang {name!r}: expected one of {known}")
        return gang

    @override
    def __iter__(self) -> Iterator[str]:
        return iter(self._built_names())

    @override
    def __len__(self) -> int:
        return len(self._built_names())

    def _built_names(self) -> list[str]:
        """GANG_NAMES but those of gangs not built (:class:`UnbuiltGang`)."""
        return [n for n in GANG_NAMES if not isinstance(self._gangs[_canonical(n)], UnbuiltGang)]

    @override
    def __eq__(self, other: object) -> bool:
        return self is other

    @override
    def __hash__(self) -> int:
        return id(self)

    @property
    def device(self) -> torch.device:
        """The device of this process's gangs: the root gang's."""
        return self.root.device

    @property
    def mesh(self) -> DeviceMesh | None:
        """The dense DeviceMesh, ``meshes["dense"]``; None for fake gangs."""
        return self.meshes.get("dense")

    @property
    def expert_mesh(self) -> DeviceMesh | None:
        """The expert DeviceMesh, ``meshes["expert"]``; None without an expert view or fake."""
        return self.meshes.get("expert")

    def communicators(self) -> list[CommunicatorInfo]:
        """The communicators this process's gangs use, one per distinct group, root's included.

        Gangs of size 1 have none. Closed gangs are left out.
        """
        found: dict[int, tuple[ProcessGroupGang, list[str]]] = {}
        for name, gang in self._gangs.items():
            # global_ranks, timeout and whether it is open: a ProcessGroupGang's own
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

    def layout_record(self) -> dict[str, Any]:
        """The job's layout record (see :func:`gangmesh.assembly.record.layout_record`): every
        process must call it.

        :raises GangError: a peer died or did not answer.
        """
        return record.layout_record(self)

    def write_layout_record(self, path: str | Path) -> dict[str, Any]:
        """Gather the layout record and write it as JSON to ``path`` from root rank 0 only;
        every process must call it. Returns the record.

        :param path: the file rank 0 writes.
        :raises GangError: a peer died or did not answer.
        :raises OSError: rank 0 cannot write ``path``.
        """
        gathered = record.layout_record(self)
        if self.root.rank == 0:
            record.write_layout_record(gathered, path)
        return gathered

    @override
    def __repr__(self) -> str:
        rank, size = self.root.rank, self.root.size
        ranks = self._root_ranks()
        managed = [name for name, gang in self.items() if isinstance(gang, ManagedGang)]
        placed = [(name, gang) for name, gang in self.items() if name not in managed]
        parts = [
            f"{name} {gang.rank}/{gang.size} "
            f"{short_group([ranks[r] for r in self.plan.group_of(rank, name)])}"
            for name, gang in placed
            if gang.size > 1
        ]
        parts.extend(f"{name} across replica groups (managed)" for name in managed)
        lone = [name for name, gang in placed if gang.size == 1]
        if lone:
            parts.append(f"size 1: {', '.join(lone)}")
        unbuilt = [name for name in GANG_NAMES if name not in self._built_names()]
        if unbuilt:
            parts.append(f"not built: {', '.join(unbuilt)}")
        where = "" if ranks == list(range(size)) else f", global rank {ranks[rank]}"
        return f"Gangs(rank {rank} of {size}{where}: {'; '.join(parts)})"

    def _root_ranks(self) -> list[int]:
        """The global rank of each root rank (the plan's ranks): a part's are its own."""
        if not self.root.supports_process_group:
            return list(range(self.root.size))
        try:
            return dist.get_process_group_ranks(self.root.as_process_group())
        except (GangError, RuntimeError, ValueError):  # closed, or torch is down
            return list(range(self.root.size))

    def __enter__(self) -> Gangs:
        """Become the calling thread's current gangs for :attr:`device`."""
        ENTERED.enter(self, (self.device,))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Leave the block; torch's own error of a collective that failed inside it because
        a peer broke (FSDP2's, DTensor's, a pipeline's) leaves it as a GangError that names
        the culprit and the collective, torch's error in ``__cause__``.

        :raises GangError: a collective inside the block failed after a peer broke.
        """
        ENTERED.leave(self)
        named = None if exc is None else faults.consequence(exc)
        if named is not None:
            raise named from exc

    def close(self) -> None:
        """Close the gangs and groups these Gangs created; later calls do nothing.

        The root gang, groups of a mesh given to :meth:`from_mesh`, and groups that
        another Gangs still uses stay intact. Communicates with no peer.
        """
        if self._closed:
            return
        self._closed = True
        gangs = {name: gang for name, gang in self._gangs.items() if name != ROOT}
        mesh_build.release(mesh_build.Built(gangs, leases=self._leases))

    def _release(self) -> None:
        """Drop the meshes (they hold torch's groups); for the exit teardown only."""
        self.meshes = Meshes({})

    @classmethod
    def from_mesh(
        cls,
        mesh: DeviceMesh,
        *,
        root: Gang | None = None,
        timeout: timedelta | None = None,
        expert_mesh: DeviceMesh | None = None,
    ) -> Gangs:
        """Wrap DeviceMeshes a user built, or one gangmesh handed out; their groups are never
        destroyed by gangmesh.

        ``mesh`` has dimension names among pp, dp_replicate, dp_shard, cp and tp,
        in any order, or one merged data dimension instead of its members (dp or batch,
        dp_shard_cp or fsdp, dp_cp or loss), read as dp_shard (fully sharded);
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

        A mesh of ``meshes`` of open gangs (any of them, under either name) gives those gangs'
        plan and groups, whatever it merges, and is kept under its own name; ``root``
        defaults to theirs.

        :param mesh: the dense mesh, or a mesh of ``meshes``.
        :param root: the gang of every process; default: the default process group's.
        :param timeout: timeout of the flattened groups gangmesh creates.
        :param expert_mesh: the expert mesh, if the user has one; without it,
            gangmesh creates the expert gangs' groups.
        :raises ValueError: unknown or missing dimension names, a mesh that does not
            cover the root or is not numbered row-major, an expert mesh that does
            not fit the dense one, or a mesh whose groups this job does not hold (of another
            world, or of closed gangs), saying whose it is.
        """
        return cls._of(*wrap_meshes(mesh, expert_mesh, root, timeout))


ENTERED: DeviceStack[Gangs] = DeviceStack()
"""The Gangs each thread entered and has not left, each for its devices: ``with gangs:``
enters one for its own device, fairseq2's ``set_gangs`` (:mod:`gangmesh.compat.fairseq2`)
for the meta device too."""
