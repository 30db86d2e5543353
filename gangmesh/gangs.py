"""Gangs: one gang per parallel dimension, built from one DeviceMesh."""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Iterator
from datetime import timedelta
from types import TracebackType
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from gangmesh._validate import check_positive
from gangmesh.gang import (
    DEFAULT_TIMEOUT,
    FakeGang,
    Gang,
    GangError,
    ProcessGroupGang,
    backend_options,
)
from gangmesh.topology import DIM_NAMES, MeshTopology

log = logging.getLogger("gangmesh")


class Gangs:
    """The gangs of one process: root, data (dp, rdp, sdp), tensor, pipeline, context.

    ``mesh`` is the DeviceMesh the gangs come from (None for fake gangs); hand it
    to FSDP2 (``mesh["dp_replicate", "dp_shard"]`` for HSDP), tensor parallelism
    (``mesh["tp"]``) and pipeline stages. Used as a context manager it becomes
    the calling thread's current gangs (see :func:`maybe_get_current_gangs`).

    Raises ValueError if root rank 0 is not rank 0 of every gang.
    """

    __slots__ = ("_closed", "cp", "dp", "mesh", "pp", "rdp", "root", "sdp", "timeout", "tp")

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
        mesh: DeviceMesh | None = None,
        timeout: timedelta | None = None,
    ) -> None:
        self.root = root
        self.dp = dp
        self.rdp = rdp
        self.sdp = sdp
        self.tp = tp
        self.pp = pp
        self.cp = cp if cp is not None else FakeGang(root.device)
        self.mesh = mesh
        self.timeout = timeout
        self._closed = False
        if root.rank == 0:
            off = [name for name, gang in self.items() if gang.rank != 0]
            if off:
                raise ValueError(
                    f"{', '.join(off)}: root rank 0 must be rank 0 of every gang, but its rank "
                    f"there is {', '.join(str(getattr(self, name).rank) for name in off)}"
                )

    def items(self) -> Iterator[tuple[str, Gang]]:
        """(name, gang) for every parallel gang, root excluded."""
        for name in ("dp", "rdp", "sdp", "tp", "pp", "cp"):
            yield name, getattr(self, name)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{name}={gang.size}" for name, gang in self.items())
        return f"Gangs(root={self.root.size}, {sizes}, rank={self.root.rank})"

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
        """Close every gang, the root last; later calls do nothing."""
        if self._closed:
            return
        self._closed = True
        seen: set[int] = {id(self.root)}
        for _, gang in self.items():
            if id(gang) not in seen:
                seen.add(id(gang))
                gang.close()
        self.root.close()

    @classmethod
    def from_mesh(
        cls,
        mesh: DeviceMesh,
        *,
        root: Gang | None = None,
        timeout: timedelta | None = None,
    ) -> Gangs:
        """Wrap a DeviceMesh whose dimension names are among pp, dp_replicate,
        dp_shard, cp, tp (or dp); missing dimensions become gangs of size 1.

        ``root`` defaults to the default process group. The ``dp`` gang is the
        mesh's "dp" dimension if it has one, else dp_replicate x dp_shard
        flattened. Raises ValueError for unknown dimension names or a mesh
        without names.
        """
        if not isinstance(mesh, DeviceMesh):
            raise TypeError(f"mesh: expected a DeviceMesh, got {type(mesh).__name__}")
        names = mesh.mesh_dim_names
        if not names:
            raise ValueError(f"mesh: expected dimension names among {DIM_NAMES}, got none")
        unknown = [name for name in names if name not in (*DIM_NAMES, "dp")]
        if unknown:
            raise ValueError(
                f"mesh: unknown dimension names {unknown}; expected names among "
                f"{(*DIM_NAMES, 'dp')}"
            )
        device = _mesh_device(mesh)
        if root is None:
            world = dist.group.WORLD
            assert isinstance(world, dist.ProcessGroup)
            root = ProcessGroupGang(world, device, name="root", timeout=timeout)
        if root.size != mesh.size():
            raise ValueError(
                f"mesh: expected a mesh over all {root.size} processes of root, got {mesh.size()}"
            )

        def gang(dim: str) -> Gang:
            if dim not in names:
                return FakeGang(device)
            return _mesh_gang(mesh.get_group(dim), device, dim, timeout)

        dp: Gang
        replicate: Gang
        if "dp" in names:
            dp = gang("dp")
            shard, replicate = dp, FakeGang(device)  # one data dim: fully sharded
        else:
            shard, replicate = gang("dp_shard"), gang("dp_replicate")
            dp = _flat_dp_gang(mesh, device, timeout) or (
                shard if "dp_shard" in names else replicate
            )
        return cls(
            root=root,
            dp=dp,
            rdp=replicate,
            sdp=shard,
            tp=gang("tp"),
            pp=gang("pp"),
            cp=gang("cp"),
            mesh=mesh,
            timeout=timeout,
        )


def _mesh_gang(
    pg: dist.ProcessGroup, device: torch.device, name: str, timeout: timedelta | None
) -> ProcessGroupGang:
    return ProcessGroupGang(
        pg, device, name=name, timeout=timeout, owns_group=pg is not dist.group.WORLD
    )


def _flat_dp_gang(
    mesh: DeviceMesh, device: torch.device, timeout: timedelta | None
) -> ProcessGroupGang | None:
    """The gang of dp_replicate x dp_shard flattened, when the mesh has both."""
    names = mesh.mesh_dim_names or ()
    if "dp_replicate" not in names or "dp_shard" not in names:
        return None
    flat = mesh["dp_replicate", "dp_shard"]._flatten("dp")
    return _mesh_gang(flat.get_group(), device, "dp", timeout)


def _mesh_device(mesh: DeviceMesh) -> torch.device:
    if mesh.device_type == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device(mesh.device_type)


def create_gangs(
    root_gang: Gang,
    *,
    pp: int = 1,
    dp_replicate: int = 1,
    dp_shard: int = -1,
    cp: int = 1,
    tp: int = 1,
    timeout: timedelta | None = None,
) -> Gangs:
    """Build every parallel gang of ``root_gang`` from one DeviceMesh.

    The mesh has dimensions (pp, dp_replicate, dp_shard, cp, tp), outermost
    first, plus the flattened "dp" (dp_replicate x dp_shard) and, when cp > 1,
    "dp_shard_cp". Exactly one size may be -1 (inferred). ``timeout`` (default:
    the root gang's) is the timeout of every process group created.

    With a FakeGang root of size N, returns FakeGangs with the ranks and sizes
    of the plan, without torch.distributed.

    Raises ValueError for sizes that do not multiply to ``root_gang.size`` or a
    root gang that is not the default process group; GangError if a process
    group cannot be created.
    """
    if not isinstance(root_gang, Gang):
        raise TypeError(f"root_gang: expected a Gang, got {type(root_gang).__name__}")
    if root_gang.supports_process_group and (
        not isinstance(root_gang, ProcessGroupGang)
        or root_gang.as_process_group() is not dist.group.WORLD
    ):
        raise ValueError(
            f"root_gang: expected the gang of the default process group "
            f"(size {dist.get_world_size()}), got {root_gang.describe()}"
        )
    plan = MeshTopology(
        root_gang.size, pp=pp, dp_replicate=dp_replicate, dp_shard=dp_shard, cp=cp, tp=tp
    )
    if timeout is not None and not (isinstance(timeout, timedelta) and timeout > timedelta(0)):
        raise ValueError(f"timeout: expected a positive datetime.timedelta, got {timeout!r}")
    if not isinstance(root_gang, ProcessGroupGang):
        return simulated_gangs(root_gang, plan)
    timeout = timeout or root_gang.timeout or DEFAULT_TIMEOUT
    log.info("Creating gangs %s", plan)
    mesh = _build_mesh(root_gang, plan, timeout)
    return Gangs.from_mesh(mesh, root=root_gang, timeout=timeout)


def _build_mesh(root: ProcessGroupGang, plan: MeshTopology, timeout: timedelta) -> DeviceMesh:
    backend = dist.get_backend(root.as_process_group())
    options = backend_options(backend, timeout, root.high_priority)
    override: Any = None if options is None else (backend, options)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*flattened dim.*")
            mesh = init_device_mesh(
                root.device.type,
                plan.shape,
                mesh_dim_names=DIM_NAMES,
                backend_override=None if override is None else dict.fromkeys(DIM_NAMES, override),
            )
            mesh["dp_replicate", "dp_shard"]._flatten("dp", backend_override=override)
            if plan.dims["cp"] > 1:
                mesh["dp_shard", "cp"]._flatten("dp_shard_cp", backend_override=override)
    except RuntimeError as ex:
        raise GangError(f"creating the device mesh {plan} failed: {ex}") from ex
    return mesh


def simulated_gangs(root_gang: Gang, plan: MeshTopology) -> Gangs:
    """FakeGangs with the ranks and sizes ``plan`` gives the root gang's rank."""
    rank = root_gang.rank

    def gang(dim: str) -> FakeGang:
        return FakeGang(root_gang.device, rank=plan.rank_in(rank, dim), size=plan.size_of(dim))

    return Gangs(
        root=root_gang,
        dp=gang("dp"),
        rdp=gang("dp_replicate"),
        sdp=gang("dp_shard"),
        tp=gang("tp"),
        pp=gang("pp"),
        cp=gang("cp"),
    )


def create_parallel_gangs(root_gang: Gang, *, tp_size: int = 1) -> Gangs:
    """Data and tensor parallel gangs: tp groups of ``tp_size`` adjacent ranks.

    For 8 processes and ``tp_size=2``: tp [0,1] [2,3] [4,5] [6,7] and dp
    [0,2,4,6] [1,3,5,7]. Data parallelism is replicated (rdp = dp, sdp of size
    1) until :func:`create_fsdp_gangs` splits it.

    Raises ValueError if ``tp_size`` is not a positive factor of the root size.
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
    Gangs over a new mesh; tp, pp and cp keep their layout.

    Raises ValueError if ``intra_node_size`` does not divide ``gangs.dp.size``.
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
    return create_gangs(
        gangs.root,
        pp=gangs.pp.size,
        dp_replicate=replicate,
        dp_shard=shard,
        cp=gangs.cp.size,
        tp=gangs.tp.size,
        timeout=gangs.timeout,
    )


def create_fake_gangs(device: torch.device) -> Gangs:
    """Gangs of one process (FakeGangs of size 1) on ``device``."""
    gang = FakeGang(device)
    return Gangs(root=gang, dp=gang, rdp=gang, sdp=gang, tp=gang, pp=gang, cp=gang)


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


setup_parallel_gangs = create_parallel_gangs
setup_hybrid_fsdp_gangs = create_fsdp_gangs
