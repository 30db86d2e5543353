"""Plan a parallel layout without processes: which ranks form which gang.

Dimensions, outermost (slowest-varying) to innermost: pp, dp_replicate,
dp_shard, cp, tp. A rank is the row-major index of its coordinate in a mesh of
that shape, so inner dimensions hold adjacent ranks and stay on one node first.
This module uses numpy only; nothing here starts or needs a process group.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gangmesh._validate import check_int, check_positive, is_int

DIM_NAMES: tuple[str, ...] = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
"""Mesh dimension names, outermost first."""

ALIASES: dict[str, tuple[str, ...]] = {
    "dp": ("dp_replicate", "dp_shard"),
    "rdp": ("dp_replicate",),
    "sdp": ("dp_shard",),
    "dp_shard_cp": ("dp_shard", "cp"),
}
"""Names of flattened dimensions (and of gangs named after one dimension)."""


@dataclass(frozen=True)
class LocalityFinding:
    """A gang that crosses node boundaries where it should stay on one node."""

    dim: str
    group: list[int]
    nodes: list[int]
    message: str

    def __str__(self) -> str:
        return self.message


class MeshTopology:
    """The rank layout of a job with named parallel dimensions.

    Exactly one size may be -1; it is inferred from ``world_size``.

    >>> plan = MeshTopology(8, tp=2)
    >>> plan.dims
    {'pp': 1, 'dp_replicate': 1, 'dp_shard': 4, 'cp': 1, 'tp': 2}
    >>> plan.groups("tp").tolist()
    [[0, 1], [2, 3], [4, 5], [6, 7]]
    >>> plan.group_of(5, "dp")
    [1, 3, 5, 7]

    Raises ValueError naming the dimensions, sizes and world size when the
    sizes are not positive or their product is not ``world_size``.
    """

    def __init__(
        self,
        world_size: int,
        *,
        pp: int = 1,
        dp_replicate: int = 1,
        dp_shard: int = -1,
        cp: int = 1,
        tp: int = 1,
    ) -> None:
        self._world_size = check_positive("world_size", world_size)
        sizes = {"pp": pp, "dp_replicate": dp_replicate, "dp_shard": dp_shard, "cp": cp, "tp": tp}
        self._dims = _resolve_sizes(self._world_size, sizes)
        self._shape = tuple(self._dims.values())
        self._strides = tuple(math.prod(self._shape[i + 1 :]) for i in range(len(self._shape)))

    def __repr__(self) -> str:
        sizes = ", ".join(f"{name}={size}" for name, size in self._dims.items())
        return f"MeshTopology({self._world_size}, {sizes})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MeshTopology):
            return NotImplemented
        return self._world_size == other._world_size and self._dims == other._dims

    def __hash__(self) -> int:
        return hash((self._world_size, self._shape))

    @property
    def world_size(self) -> int:
        """Number of processes in the job."""
        return self._world_size

    @property
    def dims(self) -> dict[str, int]:
        """Dimension name -> size, outermost first."""
        return dict(self._dims)

    @property
    def shape(self) -> tuple[int, ...]:
        """Sizes in dimension order, the mesh shape for init_device_mesh."""
        return self._shape

    def resolve(self, dim: str | tuple[str, ...]) -> tuple[str, ...]:
        """The mesh dimensions behind a name, alias or tuple of names, outermost first.

        Raises ValueError for unknown names, repeats or names out of mesh order.
        """
        names = ALIASES.get(dim, (dim,)) if isinstance(dim, str) else tuple(dim)
        if not names:
            raise ValueError("dim: expected at least one dimension name, got ()")
        for name in names:
            if name not in self._dims:
                known = ", ".join([*DIM_NAMES, *ALIASES])
                raise ValueError(f"dim: unknown dimension {name!r}; expected one of {known}")
        order = [DIM_NAMES.index(name) for name in names]
        if order != sorted(set(order)):
            raise ValueError(
                f"dim: expected distinct dimensions in mesh order {DIM_NAMES}, got {names}"
            )
        return names

    def size_of(self, dim: str | tuple[str, ...]) -> int:
        """Size of a dimension or of several flattened together."""
        return math.prod(self._dims[name] for name in self.resolve(dim))

    def groups(self, dim: str | tuple[str, ...]) -> np.ndarray:
        """Every group along ``dim``: an int64 array ``[n_groups, group_size]``.

        Row i is the i-th group in row-major order of the other dimensions;
        within a row, ranks follow the coordinate along ``dim``.
        """
        names = self.resolve(dim)
        inner = [DIM_NAMES.index(name) for name in names]
        outer = [i for i in range(len(DIM_NAMES)) if i not in inner]
        mesh = np.arange(self._world_size, dtype=np.int64).reshape(self._shape)
        groups: np.ndarray = mesh.transpose(outer + inner).reshape(-1, self.size_of(names))
        return groups

    def group_of(self, rank: int, dim: str | tuple[str, ...]) -> list[int]:
        """The group along ``dim`` that holds ``rank``, in O(number of dims) work."""
        coordinate = self._coordinate(self._check_rank(rank))
        names = self.resolve(dim)
        base = rank - sum(coordinate[n] * self._stride(n) for n in names)
        offsets = np.zeros(1, dtype=np.int64)
        for name in names:
            steps = np.arange(self._dims[name], dtype=np.int64) * self._stride(name)
            offsets = (offsets[:, None] + steps[None, :]).reshape(-1)
        return (base + offsets).tolist()  # type: ignore[no-any-return]

    def rank_in(self, rank: int, dim: str | tuple[str, ...]) -> int:
        """The rank of process ``rank`` inside its group along ``dim``."""
        coordinate = self._coordinate(self._check_rank(rank))
        index = 0
        for name in self.resolve(dim):
            index = index * self._dims[name] + coordinate[name]
        return index

    def coordinate(self, rank: int) -> dict[str, int]:
        """The coordinate of ``rank`` along each dimension."""
        return self._coordinate(self._check_rank(rank))

    def rank_of(self, **coordinate: int) -> int:
        """The rank at a coordinate; omitted dimensions count as 0.

        Raises ValueError for unknown dimensions or coordinates out of range.
        """
        rank = 0
        for name, value in coordinate.items():
            if name not in self._dims:
                raise ValueError(f"{name}: unknown dimension; expected one of {DIM_NAMES}")
            size = self._dims[name]
            position = check_int(name, value)
            if not 0 <= position < size:
                raise ValueError(f"{name}: expected a coordinate in [0, {size}), got {position}")
            rank += position * self._stride(name)
        return rank

    def check_locality(self, ranks_per_node: int) -> list[LocalityFinding]:
        """Gangs that cross nodes where they should not; empty when all is node-local.

        Nodes hold ``ranks_per_node`` consecutive ranks. tp, then cp, then
        dp_shard should stay on one node whenever they and the dimensions inside
        them fit in one; with HSDP (dp_replicate > 1) sharding should never cross
        nodes, since rdp is the gang meant to.
        """
        per_node = check_positive("ranks_per_node", ranks_per_node)
        findings = []
        inner = 1
        for name in ("tp", "cp", "dp_shard"):
            size = self._dims[name]
            inner *= size
            if size == 1:
                continue
            fits = inner <= per_node
            hsdp = name == "dp_shard" and self._dims["dp_replicate"] > 1
            if not (fits or hsdp or name == "tp"):
                continue
            finding = self._crossing(name, per_node, fits, hsdp)
            if finding is not None:
                findings.append(finding)
        return findings

    def _crossing(self, name: str, per_node: int, fits: bool, hsdp: bool) -> LocalityFinding | None:
        nodes = self.groups(name) // per_node
        spans = nodes.min(axis=1) != nodes.max(axis=1)
        if not spans.any():
            return None
        index = int(np.argmax(spans))
        group = self.groups(name)[index].tolist()
        group_nodes = sorted(set(nodes[index].tolist()))
        count = int(spans.sum())
        if fits:
            why = f"it fits in a node of {per_node} ranks but is not aligned to node boundaries"
        elif name == "tp":
            why = f"tp={self._dims['tp']} is larger than a node of {per_node} ranks"
        else:
            why = (
                f"with HSDP (dp_replicate={self._dims['dp_replicate']}) sharding should stay "
                f"inside a node of {per_node} ranks; dp_shard*cp*tp = "
                f"{self.size_of(('dp_shard', 'cp', 'tp'))}"
            )
        message = (
            f"{name}: {count} of {len(spans)} groups span nodes, e.g. {_short(group)} on "
            f"nodes {group_nodes}; {why}"
        )
        return LocalityFinding(name, group, group_nodes, message)

    def _stride(self, name: str) -> int:
        return self._strides[DIM_NAMES.index(name)]

    def _check_rank(self, rank: int) -> int:
        value = check_int("rank", rank)
        if not 0 <= value < self._world_size:
            raise ValueError(f"rank: expected a rank in [0, {self._world_size}), got {value}")
        return value

    def _coordinate(self, rank: int) -> dict[str, int]:
        return {
            name: (rank // stride) % size
            for (name, size), stride in zip(self._dims.items(), self._strides, strict=True)
        }


def _resolve_sizes(world_size: int, sizes: Mapping[str, object]) -> dict[str, int]:
    """Check the sizes and infer the one given as -1."""
    for name, size in sizes.items():
        if not is_int(size):
            raise ValueError(f"{name}: expected a positive int or -1, got {size!r}")
        if size == 0 or int(size) < -1:  # type: ignore[call-overload]
            raise ValueError(f"{name}: expected a positive int or -1, got {size}")
    checked = {name: int(size) for name, size in sizes.items()}  # type: ignore[call-overload]
    inferred = [name for name, size in checked.items() if size == -1]
    if len(inferred) > 1:
        raise ValueError(
            f"{' and '.join(inferred)}: at most one size may be -1 (inferred); got "
            f"{' * '.join(checked)} = {_product_text(checked)}"
        )
    known = math.prod(size for size in checked.values() if size != -1)
    if inferred:
        others = {name: size for name, size in checked.items() if size != -1}
        if world_size % known:
            raise ValueError(
                f"{inferred[0]}: cannot infer its size: {' * '.join(others)} = "
                f"{_product_text(others)} = {known} does not divide world_size {world_size}"
            )
        checked[inferred[0]] = world_size // known
    elif known != world_size:
        raise ValueError(
            f"{' * '.join(checked)} = {_product_text(checked)} = {known}, "
            f"but world_size is {world_size}"
        )
    return checked


def _product_text(sizes: dict[str, int]) -> str:
    return " * ".join(str(size) for size in sizes.values())


def _short(group: list[int], limit: int = 8) -> str:
    if len(group) <= limit:
        return str(group)
    return "[" + ", ".join(map(str, group[:limit])) + f", ... ({len(group)} ranks)]"
