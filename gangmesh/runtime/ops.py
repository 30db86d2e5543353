"""Helpers over any Gang: flags, sums, dicts of metrics, Python objects."""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from gangmesh.plan._checks import InvalidTypeError
from gangmesh.runtime.gang import Gang, ReduceOperation, as_reduce_operation


def _check_gang(gang: object) -> None:
    if not isinstance(gang, Gang):
        raise InvalidTypeError(f"gang: expected a Gang, got {type(gang).__name__}")


def broadcast_flag(gang: Gang, flag: bool, source_rank: int = 0) -> bool:
    """The ``flag`` of gang rank ``source_rank``, on every process.

    >>> import torch
    >>> from gangmesh import FakeGang
    >>> broadcast_flag(FakeGang(torch.device("cpu")), True)
    True

    :param gang: the gang to broadcast over.
    :param flag: this process's flag; only ``source_rank``'s counts.
    :param source_rank: the gang rank whose flag every process gets.
    :raises TypeError: ``flag`` is not a bool (or an int used as one).
    """
    _check_gang(gang)
    if not isinstance(flag, (bool, int)):
        raise InvalidTypeError(f"flag: expected a bool, got {flag!r}")
    tensor = torch.tensor(bool(flag), device=gang.device)
    gang.broadcast(tensor, source_rank)
    return bool(tensor.item())


def all_sum(gang: Gang, value: float | int | Tensor) -> Tensor:
    """The sum of ``value`` over the gang, as a tensor on the gang's device.

    >>> import torch
    >>> from gangmesh import FakeGang
    >>> all_sum(FakeGang(torch.device("cpu"), size=4), 2.5)
    tensor(10.)

    :param gang: the gang to sum over.
    :param value: this process's number or real tensor.
    :raises TypeError: ``value`` is neither a real number nor a real tensor.
    """
    _check_gang(gang)
    if not _is_number(value) and not (isinstance(value, Tensor) and not value.is_complex()):
        raise InvalidTypeError(f"value: expected a real number or tensor, got {value!r}")
    tensor = torch.as_tensor(value, device=gang.device).clone()
    gang.all_reduce(tensor, ReduceOperation.SUM)
    return tensor


def all_reduce_dict(
    gang: Gang, data: Mapping[str, Any], op: ReduceOperation = ReduceOperation.SUM
) -> dict[str, Any]:
    """Reduce a dict of numbers and real tensors with one collective.

    Every process passes the same keys with values of the same shapes. The values
    travel in one float64 buffer (exact for integers up to 2**53) and come back
    with their original types, devices, dtypes and shapes, except that MEAN turns
    integers into floats (float64 for integer tensors), as a mean need not be whole.

    >>> import torch
    >>> from gangmesh import FakeGang
    >>> all_reduce_dict(FakeGang(torch.device("cpu"), size=4), {"tokens": 3, "loss": 0.5})
    {'tokens': 12, 'loss': 2.0}

    :param gang: the gang to reduce over.
    :param data: metric name -> this process's number or real tensor.
    :param op: how the values combine (another enum's member of the same name too).
    :raises TypeError: ``op`` is no reduce operation, ``data`` is not a mapping, or a
        value is neither a real number nor a real tensor.
    """
    _check_gang(gang)
    op = as_reduce_operation(op)
    if not isinstance(data, Mapping):
        raise InvalidTypeError(
            f"data: expected a mapping of str to numbers or tensors, got {data!r}"
        )
    flat_values = []
    for key, value in data.items():
        if isinstance(value, Tensor) and not value.is_complex():
            flat_values.append(value.detach().reshape(-1).to(gang.device, torch.float64))
        elif _is_number(value):
            flat_values.append(torch.tensor([value], dtype=torch.float64, device=gang.device))
        else:
            raise InvalidTypeError(
                f"data[{key!r}]: expected a real number or tensor, got {value!r}"
            )
    if not flat_values:
        return {}
    buffer = torch.cat(flat_values)
    gang.all_reduce(buffer, op)
    mean = op is ReduceOperation.MEAN
    result: dict[str, Any] = {}
    offset = 0
    for (key, value), flat in zip(data.items(), flat_values, strict=True):
        reduced = buffer[offset : offset + flat.numel()]
        offset += flat.numel()
        if isinstance(value, Tensor):
            exact = value.is_floating_point() or not mean
            result[key] = reduced.view(value.shape).to(
                value.device, value.dtype if exact else torch.float64
            )
        else:
            result[key] = float(reduced.item()) if mean else type(value)(reduced.item())
    return result


def _is_number(value: object) -> bool:
    """A real Python number, bools excluded."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def all_gather_objects(gang: Gang, obj: Any) -> list[Any]:
    """The picklable ``obj`` of every process, in gang rank order.

    Two all_gathers: the pickle lengths, then the pickles padded to the longest.
    Unpickling runs code chosen by the sender: use it only among trusted peers.

    :param gang: the gang to gather over.
    :param obj: this process's object.
    """
    _check_gang(gang)
    payload = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
    lengths = torch.empty(gang.size, dtype=torch.int64, device=gang.device)
    gang.all_gather(lengths, torch.tensor([payload.numel()], device=gang.device))
    longest = int(lengths.max().item())
    padded = torch.zeros(longest, dtype=torch.uint8, device=gang.device)
    padded[: payload.numel()] = payload.to(gang.device)
    gathered = torch.empty(gang.size, longest, dtype=torch.uint8, device=gang.device)
    gang.all_gather(gathered, padded)
    rows = gathered.cpu().numpy()
    return [pickle.loads(rows[i, : lengths[i]].tobytes()) for i in range(gang.size)]
