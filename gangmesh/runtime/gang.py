"""The Gang interface: a set of processes that run collectives together."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import timedelta
from enum import Enum
from typing import Any

import torch
from torch import Tensor
from torch.distributed import ProcessGroup
from typing_extensions import override

from gangmesh.plan._checks import InvalidTypeError, check_ranks
from gangmesh.runtime._validate import (
    Splits,
    check_all_to_all,
    check_gather_output,
    check_gather_outputs,
    check_reduce_scatter,
    check_source_rank,
    check_tensor,
)

DEFAULT_TIMEOUT = timedelta(minutes=15)
"""Timeout of every process group gangmesh creates when the caller gives none."""


class ReduceOperation(Enum):
    """How all_reduce and reduce_scatter combine the tensors of a gang."""

    SUM = 1
    """The sum."""
    MEAN = 2
    """The mean; for floating-point and complex tensors only."""
    PRODUCT = 3
    """The product."""
    MIN = 4
    """The element-wise minimum."""
    MAX = 5
    """The element-wise maximum."""

    # Members are singletons: identity hashing keeps dict lookups on the hot path cheap.
    __hash__ = object.__hash__


_MEAN = ReduceOperation.MEAN
_NAMED_ALIKE: dict[object, ReduceOperation] = {}
"""The members of other enums taken as ReduceOperations so far: each is looked up by name once."""


def as_reduce_operation(op: object) -> ReduceOperation:
    """``op`` as a ReduceOperation: itself, or the member of the same name of another enum
    (fairseq2's ``ReduceOperation``, for one).

    :raises TypeError: ``op`` is neither, naming the members expected.
    """
    if type(op) is ReduceOperation:
        return op
    try:
        return _NAMED_ALIKE[op]
    except (KeyError, TypeError):  # not seen yet, or unhashable
        pass
    member = ReduceOperation.__members__.get(op.name) if isinstance(op, Enum) else None
    if member is None:
        raise InvalidTypeError(
            f"op: expected a ReduceOperation, or a member of an enum named like one of its "
            f"({', '.join(ReduceOperation.__members__)}), got {op!r}"
        )
    _NAMED_ALIKE[op] = member
    return member


def check_reduction(op: object, tensor: Tensor, name: str = "tensor") -> ReduceOperation:
    """``op`` as a ReduceOperation (see :func:`as_reduce_operation`), checked against the
    dtype of ``tensor``.

    :raises TypeError: ``op`` is no reduce operation, or MEAN of an integer tensor.
    """
    if type(op) is not ReduceOperation:
        op = as_reduce_operation(op)
    if op is _MEAN and not (tensor.is_floating_point() or tensor.is_complex()):
        raise InvalidTypeError(
            f"{name}: ReduceOperation.MEAN needs a floating-point or complex tensor, got dtype "
            f"{tensor.dtype}; convert it first, e.g. tensor.float()"
        )
    return op


class GangError(RuntimeError):
    """A collective failed: a timeout, a dead peer or a backend error."""

    culprits: tuple[int, ...] = ()
    """Global ranks that broke the operation, where known: those the job's failure reports
    name, or those that did not take part."""
    job: str | None = None
    """The job whose ranks :attr:`culprits` are, where a job joined to this one (launched
    apart) broke the operation; None: this job."""


class Gang(ABC):
    """A set of processes that run collective operations together.

    Every public method checks its arguments before any communication and
    raises ValueError or TypeError naming the bad one; subclasses implement the
    underscore methods and may assume valid input. Ranks are gang-local: a
    process's rank is its position in the gang, ``0 <= rank < size``.
    """

    @property
    @abstractmethod
    def rank(self) -> int:
        """This process's rank inside the gang, in ``[0, size)``."""

    @property
    @abstractmethod
    def size(self) -> int:
        """Number of processes in the gang."""

    @property
    @abstractmethod
    def device(self) -> torch.device:
        """Device that tensors passed to the collectives must live on."""

    @property
    @abstractmethod
    def supports_process_group(self) -> bool:
        """Whether :meth:`as_process_group` returns a torch ProcessGroup."""

    @abstractmethod
    def close(self) -> None:
        """Release what the gang created; safe to call more than once, never waits for peers."""

    @abstractmethod
    def as_process_group(self) -> ProcessGroup:
        """The torch ProcessGroup behind this gang, for torch.distributed APIs."""

    def create_gang(self, ranks: Sequence[int]) -> Gang | None:
        """Create a sub-gang of the given gang-local ranks.

        Every process of *this* gang calls it with the same ``ranks``, in the same
        order as its other ``create_gang`` calls. A process's rank in the sub-gang
        is its position in ``ranks``. Returns ``None`` on processes not in ``ranks``.

        :param ranks: the members, as ranks of this gang.
        :raises ValueError: ``ranks`` is empty, has duplicates or a rank outside
            ``[0, size)``.
        :raises GangError: the process group cannot be created.
        """
        return self._create_gang(check_ranks(ranks, self.size))

    def make_gang(self, ranks: Sequence[int]) -> Gang | None:
        """Same as :meth:`create_gang` (the name older code uses).

        :param ranks: the members, as ranks of this gang.
        """
        return self.create_gang(ranks)

    def barrier(self) -> None:
        """Block until every process of the gang has reached this call.

        :raises GangError: on failure or timeout.
        """
        self._barrier()

    def all_reduce(self, tensor: Tensor, op: ReduceOperation) -> None:
        """Reduce ``tensor`` in place over the gang with ``op``.

        :param tensor: this process's values; holds the result afterwards.
        :param op: how the values combine: a ReduceOperation, or a member of the same
            name of another enum (fairseq2's ``ReduceOperation``).
        :raises TypeError: ``tensor`` is not a tensor, ``op`` is no reduce operation,
            or MEAN is asked of an integer tensor.
        :raises ValueError: ``tensor`` is on another device.
        :raises GangError: on failure or timeout.
        """
        check_tensor("tensor", tensor, self.device)
        self._all_reduce(tensor, check_reduction(op, tensor))

    def all_gather(self, output_tensor: Tensor, input_tensor: Tensor) -> None:
        """Gather ``input_tensor`` of every process into ``output_tensor``, in rank order.

        ``output_tensor`` is contiguous with shape ``[size, *input_tensor.shape]``,
        ``[size * input_tensor.shape[0], *input_tensor.shape[1:]]`` or
        ``[size * input_tensor.numel()]``.

        :param output_tensor: receives every process's ``input_tensor``.
        :param input_tensor: this process's contribution.
        :raises TypeError, ValueError: mismatched types, dtypes, devices or shapes.
        :raises GangError: on failure or timeout.
        """
        check_tensor("input_tensor", input_tensor, self.device)
        check_tensor("output_tensor", output_tensor, self.device)
        check_gather_output(output_tensor, input_tensor, self.size)
        self._all_gather(output_tensor, input_tensor)

    def all_gather_to_list(self, output_tensors: list[Tensor], input_tensor: Tensor) -> None:
        """Gather ``input_tensor`` of every process into ``output_tensors[rank]``.

        :param output_tensors: ``size`` tensors; item ``r`` receives gang rank ``r``'s tensor.
        :param input_tensor: this process's contribution.
        :raises TypeError, ValueError: ``output_tensors`` does not hold ``size``
            tensors shaped like ``input_tensor``.
        :raises GangError: on failure or timeout.
        """
        check_tensor("input_tensor", input_tensor, self.device)
        check_gather_outputs(output_tensors, input_tensor, self.size, self.device)
        self._all_gather_to_list(output_tensors, input_tensor)

    def reduce_scatter(
        self, output_tensor: Tensor, input_tensor: Tensor, op: ReduceOperation
    ) -> None:
        """Reduce ``input_tensor`` over the gang and give process ``r`` chunk ``r``.

        ``input_tensor`` holds ``size`` equal chunks along dim 0: shape
        ``[size * n, *rest]`` or ``[size, *rest]``; ``output_tensor`` has the shape
        of one chunk. ``op`` works as in :meth:`all_reduce`.

        >>> from gangmesh import FakeGang
        >>> gang = FakeGang(torch.device("cpu"), rank=1, size=2)
        >>> out = torch.empty(2)
        >>> gang.reduce_scatter(out, torch.tensor([1.0, 2.0, 3.0, 4.0]), ReduceOperation.SUM)
        >>> out
        tensor([6., 8.])

        :param output_tensor: receives this process's reduced chunk.
        :param input_tensor: this process's ``size`` chunks.
        :param op: how the chunks combine.
        :raises TypeError, ValueError: mismatched types, dtypes, devices or shapes.
        :raises GangError: on failure or timeout.
        """
        check_tensor("input_tensor", input_tensor, self.device)
        check_tensor("output_tensor", output_tensor, self.device)
        op = check_reduction(op, input_tensor, "input_tensor")
        check_reduce_scatter(output_tensor, input_tensor, self.size)
        self._reduce_scatter(output_tensor, input_tensor, op)

    def all_to_all(
        self,
        output_tensor: Tensor,
        input_tensor: Tensor,
        output_split_sizes: Sequence[int] | None = None,
        input_split_sizes: Sequence[int] | None = None,
    ) -> None:
        """Send chunk ``d`` of ``input_tensor`` to gang rank ``d``; receive in rank order.

        Without split sizes the chunks are equal along dim 0. With them (``size``
        row counts along dim 0 each) they may differ per peer: this process sends
        ``input_split_sizes[d]`` rows to rank ``d`` and receives
        ``output_split_sizes[s]`` rows from rank ``s``, as MoE token dispatch needs.

        :param output_tensor: receives the chunks of every rank, in rank order.
        :param input_tensor: the chunks to send, in rank order.
        :param output_split_sizes: rows received from each rank; None for equal chunks.
        :param input_split_sizes: rows sent to each rank; None for equal chunks.
        :raises TypeError, ValueError: mismatched types, dtypes, devices or shapes,
            split lists of the wrong length, negative sizes or totals that do not
            match the tensors.
        :raises GangError: on failure or timeout.
        """
        check_tensor("input_tensor", input_tensor, self.device)
        check_tensor("output_tensor", output_tensor, self.device)
        splits = check_all_to_all(
            output_tensor, input_tensor, output_split_sizes, input_split_sizes, self.size
        )
        self._all_to_all(output_tensor, input_tensor, splits)

    def broadcast(self, tensor: Tensor, source_rank: int = 0) -> None:
        """Copy ``tensor`` of gang rank ``source_rank`` into ``tensor`` of every process.

        :param tensor: the data on ``source_rank``; receives it on the other processes.
        :param source_rank: the gang rank that sends.
        :raises ValueError: ``source_rank`` is outside ``[0, size)``.
        :raises GangError: on failure or timeout.
        """
        check_tensor("tensor", tensor, self.device)
        check_source_rank(source_rank, self.size)
        self._broadcast(tensor, source_rank)

    def broadcast_objects(self, objects: list[Any], source_rank: int = 0) -> None:
        """Replace the items of ``objects`` with those of gang rank ``source_rank``.

        Every process passes a list of the same length; the objects must be
        picklable.

        :param objects: the objects on ``source_rank``; replaced on the other processes.
        :param source_rank: the gang rank that sends.
        :raises TypeError: ``objects`` is not a list.
        :raises ValueError: ``source_rank`` is outside ``[0, size)``.
        :raises GangError: on failure or timeout.
        """
        if not isinstance(objects, list):
            raise InvalidTypeError(f"objects: expected a list, got {type(objects).__name__}")
        check_source_rank(source_rank, self.size)
        self._broadcast_objects(objects, source_rank)

    def describe(self) -> str:
        """A short description for messages: kind, size and rank."""
        return f"{type(self).__name__}(rank={self.rank}, size={self.size})"

    @override
    def __repr__(self) -> str:
        return self.describe()

    @abstractmethod
    def _create_gang(self, ranks: list[int]) -> Gang | None: ...

    @abstractmethod
    def _barrier(self) -> None: ...

    @abstractmethod
    def _all_reduce(self, tensor: Tensor, op: ReduceOperation) -> None: ...

    @abstractmethod
    def _all_gather(self, output_tensor: Tensor, input_tensor: Tensor) -> None: ...

    @abstractmethod
    def _all_gather_to_list(self, output_tensors: list[Tensor], input_tensor: Tensor) -> None: ...

    @abstractmethod
    def _reduce_scatter(
        self, output_tensor: Tensor, input_tensor: Tensor, op: ReduceOperation
    ) -> None: ...

    @abstractmethod
    def _all_to_all(self, output_tensor: Tensor, input_tensor: Tensor, splits: Splits) -> None: ...

    @abstractmethod
    def _broadcast(self, tensor: Tensor, source_rank: int) -> None: ...

    @abstractmethod
    def _broadcast_objects(self, objects: list[Any], source_rank: int) -> None: ...


class PlacedGang(Gang):
    """A gang whose rank, size and device are set once, when it is made
    (``_rank``, ``_size``, ``_device``); the base of gangmesh's own gangs."""

    _rank: int
    _size: int
    _device: torch.device

    @property
    @override
    def rank(self) -> int:
        return self._rank

    @property
    @override
    def size(self) -> int:
        return self._size

    @property
    @override
    def device(self) -> torch.device:
        return self._device
