"""Where each rank's shard of a tensor sits in the whole tensor: a box per rank, from the
tensor's shape and the mesh dimensions that split each of its dimensions.

A dimension split by several mesh dimensions is split by the first, then each piece by
the next, as FSDP2 shards a tensor-parallel shard again along its dimension 0; each split
takes ``torch.chunk``'s pieces (the last ones smaller, or empty). Mesh dimensions that
split nothing hold replicas.

>>> from gangmesh.plan.topology import MeshTopology
>>> weight = TensorShards((8, 4), "float32", {0: ("tp", "dp_shard")})
>>> weight.box(MeshTopology(4, dp_shard=2, tp=2), 3)
Box(start=(6, 0), size=(2, 4))

This module uses numpy only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, final

import numpy as np
from typing_extensions import override

from gangmesh.plan._checks import InvalidTypeError, check_int, is_int
from gangmesh.plan.dims import FLATTENED
from gangmesh.plan.topology import MeshTopology

__all__ = ["ITEM_SIZES", "Box", "TensorShards"]

ITEM_SIZES: dict[str, int] = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1,
    "float8_e5m2": 1, "complex64": 8, "complex128": 16, "int64": 8, "int32": 4,
    "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
}  # fmt: skip
"""Bytes per element of each dtype a shard may hold, by torch's name of it."""


@final
@dataclass(frozen=True)
class Box:
    """A box of a tensor: where it starts and how long it is along each dimension."""

    start: tuple[int, ...]
    """Its first index along each dimension."""
    size: tuple[int, ...]
    """Its length along each dimension."""

    @property
    def numel(self) -> int:
        """The number of elements in the box."""
        return int(np.prod(self.size, dtype=np.int64))

    def overlap(self, other: Box) -> Box | None:
        """The box both hold; None where they hold no element in common.

        :param other: a box of the same tensor.
        """
        start = tuple(max(a, b) for a, b in zip(self.start, other.start, strict=True))
        ends = zip(self.start, self.size, other.start, other.size, strict=True)
        end = tuple(min(a + m, b + n) for a, m, b, n in ends)
        size = tuple(e - s for s, e in zip(start, end, strict=True))
        return Box(start, size) if all(n > 0 for n in size) else None

    def within(self, outer: Box) -> tuple[slice, ...]:
        """The slices that take this box out of a tensor holding ``outer``.

        :param outer: a box that holds this one.
        """
        starts = zip(self.start, outer.start, self.size, strict=True)
        return tuple(slice(s - o, s - o + n) for s, o, n in starts)

    def text(self) -> str:
        """``"[0:8, 0:4]"``: the box as slices of the whole tensor."""
        return (
            "["
            + ", ".join(f"{s}:{s + n}" for s, n in zip(self.start, self.size, strict=True))
            + "]"
        )


def _chunk(start: int, length: int, index: int, count: int) -> tuple[int, int]:
    """Piece ``index`` of ``count`` of the run ``start, length``, as ``torch.chunk`` cuts."""
    each = -(-length // count) if length else 0
    first = min(index * each, length)
    return start + first, min(each, length - first)


@final
class TensorShards:
    """A tensor's shape, dtype and how a layout splits it.

    :param shape: the whole tensor's shape.
    :param dtype: torch's name of its dtype ("float32", "bfloat16", ...).
    :param split: tensor dimension -> the mesh dimensions that split it, outermost first
        (``{0: ("tp", "dp_shard")}``: tensor parallel, then FSDP2 inside each tp shard).
    :raises TypeError: a shape or split that is not so written.
    :raises ValueError: a negative length, an unknown dtype, a tensor dimension out of range
        or a mesh dimension given twice.
    """

    __slots__ = ("dtype", "shape", "split")

    def __init__(
        self, shape: Sequence[int], dtype: str, split: Mapping[int, Sequence[str]] | None = None
    ) -> None:
        if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
            raise InvalidTypeError(f"shape: expected a sequence of ints, got {shape!r}")
        self.shape = tuple(check_int(f"shape[{i}]", n) for i, n in enumerate(shape))
        if any(n < 0 for n in self.shape):
            raise ValueError(f"shape: expected lengths >= 0, got {list(self.shape)}")
        if dtype not in ITEM_SIZES:
            raise ValueError(f"dtype: expected one of {', '.join(ITEM_SIZES)}, got {dtype!r}")
        self.dtype = dtype
        self.split = _checked_split(split or {}, len(self.shape))

    @override
    def __repr__(self) -> str:
        split = {d: list(dims) for d, dims in self.split.items()}
        return f"TensorShards({list(self.shape)}, {self.dtype!r}, {split})"

    @override
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorShards):
            return NotImplemented
        return (self.shape, self.dtype, self.split) == (other.shape, other.dtype, other.split)

    @override
    def __hash__(self) -> int:
        return hash((self.shape, self.dtype, tuple(self.split.items())))

    def record(self) -> dict[str, Any]:
        """JSON-ready data that :meth:`from_record` reads back."""
        split = {str(axis): list(dims) for axis, dims in self.split.items()}
        return {"shape": list(self.shape), "dtype": self.dtype, "split": split}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> TensorShards:
        """The shards :meth:`record` wrote.

        :param record: what :meth:`record` returned (read back from JSON).
        :raises ValueError: a record that is no shards'.
        """
        try:
            split = {int(axis): dims for axis, dims in record["split"].items()}
            return cls(record["shape"], record["dtype"], split)
        except (KeyError, TypeError, AttributeError) as ex:
            raise ValueError(f"record: expected a TensorShards record, got {record!r}") from ex

    @property
    def item_size(self) -> int:
        """Bytes per element."""
        return ITEM_SIZES[self.dtype]

    def check_dims(self, plan: MeshTopology, argument: str) -> None:
        """Check that ``plan`` has every mesh dimension of the split.

        :param plan: the layout of the job that holds the tensor.
        :param argument: the argument that gave the shards, named in the error.
        :raises ValueError: a mesh dimension ``plan`` does not know.
        """
        for dims in self.split.values():
            for dim in dims:
                try:
                    plan.size_of(dim)
                except ValueError:
                    known = ", ".join([*plan.dims, *FLATTENED])
                    raise ValueError(
                        f"{argument}: split by {dim!r}, which is no dimension of the layout; "
                        f"expected some of {known}"
                    ) from None

    def box(self, plan: MeshTopology, rank: int) -> Box:
        """The box of the whole tensor that ``rank`` of ``plan`` holds.

        :param plan: the layout of the job that holds the tensor.
        :param rank: a rank of that job.
        :raises ValueError: ``rank`` is no rank of ``plan``, or the split names a mesh
            dimension ``plan`` does not have.
        """
        self.check_dims(plan, "split")
        start, size = list(np.zeros(len(self.shape), dtype=int)), list(self.shape)
        for axis, dims in self.split.items():
            for dim in dims:
                index, count = plan.rank_in(rank, dim), plan.size_of(dim)
                start[axis], size[axis] = _chunk(start[axis], size[axis], index, count)
        return Box(tuple(int(s) for s in start), tuple(size))


def _checked_split(split: object, rank: int) -> dict[int, tuple[str, ...]]:
    """``split`` as tensor dimension -> mesh dimensions, checked (see :class:`TensorShards`)."""
    if not isinstance(split, Mapping):
        raise InvalidTypeError(
            f"split: expected a mapping of tensor dims to mesh dims, got {split!r}"
        )
    checked: dict[int, tuple[str, ...]] = {}
    seen: set[str] = set()
    for axis, dims in sorted(split.items()):
        if not is_int(axis) or not 0 <= axis < rank:
            raise ValueError(f"split: expected tensor dimensions in [0, {rank}), got {axis!r}")
        if isinstance(dims, str) or not isinstance(dims, Sequence):
            raise InvalidTypeError(f"split[{axis}]: expected a sequence of mesh dims, got {dims!r}")
        twice = [dim for dim in dims if dim in seen or list(dims).count(dim) > 1]
        if twice:
            raise ValueError(f"split: expected each mesh dimension once, got {twice[0]!r} twice")
        seen.update(dims)
        if dims:
            checked[int(axis)] = tuple(str(dim) for dim in dims)
    return checked
