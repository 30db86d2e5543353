"""Checks of the tensors and ranks handed to a gang; each error names the argument.

They run before every collective, so the common case costs a few attribute reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

import torch
from torch import Tensor

from gangmesh.plan._checks import InvalidTypeError, check_index, check_int

Splits: TypeAlias = tuple[list[int] | None, list[int] | None]
"""The checked split sizes of an all_to_all: rows received from each rank, then rows sent
to each rank; None for equal chunks."""


def check_cuda_device(device: torch.device) -> None:
    """Raise unless this machine has CUDA device ``device``."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise ValueError(
            f"device: expected a device this machine has, got {device}; torch sees no CUDA "
            f"device here (torch {torch.__version__}); use cpu"
        )
    if device.index is not None and not 0 <= device.index < count:
        raise ValueError(
            f"device: expected cuda:0 to cuda:{count - 1} (this machine has {count}), got {device}"
        )


def normalized_device(device: object) -> torch.device:
    """``device`` with the index a tensor on it reports (``cuda`` -> ``cuda:<current>``).

    :raises TypeError: ``device`` is not a torch.device.
    :raises ValueError: ``device`` is the meta device.
    """
    if not isinstance(device, torch.device):
        raise InvalidTypeError(f"device: expected a torch.device, got {device!r}")
    if device.type == "meta":
        raise ValueError("device: expected a real device, got the meta device")
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def check_tensor(name: str, tensor: object, device: torch.device) -> None:
    """Raise unless ``tensor`` is a tensor on ``device`` (a normalized device)."""
    if not isinstance(tensor, Tensor):
        raise InvalidTypeError(f"{name}: expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device != device:
        raise ValueError(
            f"{name}: expected a tensor on the gang's device {device}, got {tensor.device}"
        )


def check_source_rank(source_rank: object, size: int) -> None:
    """Raise unless ``source_rank`` is a rank of a gang of ``size``."""
    if type(source_rank) is not int or not 0 <= source_rank < size:
        check_index("source_rank", source_rank, size)


def check_gather_output(output: Tensor, input_: Tensor, size: int) -> None:
    """Check the output of all_gather against the accepted shapes."""
    out, inp = output.shape, input_.shape
    if (  # concatenated along dim 0, the common form, checked first
        output.dtype is input_.dtype
        and len(out) == len(inp) == 1
        and out[0] == size * inp[0]
        and output.is_contiguous()
    ):
        return
    _check_pair(output, input_)
    if len(out) == len(inp):  # concatenated (the flat form too, for 1-dim inputs)
        if inp and out[0] == size * inp[0] and (len(inp) == 1 or out[1:] == inp[1:]):
            return
    elif len(out) == len(inp) + 1:  # stacked
        if out[0] == size and out[1:] == inp:
            return
    elif len(out) == 1 and out[0] == size * input_.numel():  # flat
        return
    accepted = [[size, *inp], [size * input_.numel()]]
    if inp:
        accepted.append([size * inp[0], *inp[1:]])
    expected = " or ".join(str(list(s)) for s in dict.fromkeys(map(tuple, accepted)))
    raise ValueError(f"output_tensor: expected shape {expected}, got {list(out)}")


def check_gather_outputs(outputs: object, input_: Tensor, size: int, device: torch.device) -> None:
    """Check the output list of all_gather_to_list."""
    shape, dtype = input_.shape, input_.dtype
    if (
        type(outputs) is list
        and len(outputs) == size
        and all(
            isinstance(o, Tensor) and o.shape == shape and o.dtype is dtype and o.device == device
            for o in outputs
        )
    ):
        return
    if not isinstance(outputs, list):
        raise InvalidTypeError(
            f"output_tensors: expected a list of tensors, got {type(outputs).__name__}"
        )
    if len(outputs) != size:
        raise ValueError(
            f"output_tensors: expected {size} tensors (the gang size), got {len(outputs)}"
        )
    for i, output in enumerate(outputs):
        check_tensor(f"output_tensors[{i}]", output, device)
        if output.shape != shape or output.dtype != dtype:
            raise ValueError(
                f"output_tensors[{i}]: expected shape {list(shape)} and dtype "
                f"{dtype} like input_tensor, got {list(output.shape)} and {output.dtype}"
            )


def check_reduce_scatter(output: Tensor, input_: Tensor, size: int) -> None:
    """Check that ``input_`` holds ``size`` chunks of ``output``'s shape along dim 0."""
    out, inp = output.shape, input_.shape
    if (  # both flat, the common form, checked first
        output.dtype is input_.dtype
        and len(out) == len(inp) == 1
        and inp[0] == size * out[0]
        and output.is_contiguous()
    ):
        return
    _check_pair(output, input_)
    if len(inp) == len(out):
        if out and inp[0] == size * out[0] and (len(out) == 1 or inp[1:] == out[1:]):
            return
    elif len(inp) == len(out) + 1 and inp[0] == size and inp[1:] == out:
        return
    chunk = f"[{size * out[0]}{''.join(f', {d}' for d in out[1:])}]" if out else "-"
    raise ValueError(
        f"input_tensor: expected {size} chunks shaped like output_tensor {list(out)} along "
        f"dim 0, that is shape {[size, *out]} or {chunk}, got {list(inp)}"
    )


def check_all_to_all(
    output: Tensor,
    input_: Tensor,
    output_split_sizes: Sequence[int] | None,
    input_split_sizes: Sequence[int] | None,
    size: int,
) -> Splits:
    """Check the tensors and split sizes of all_to_all; return the splits as lists."""
    _check_pair(output, input_)
    out, inp = output.shape, input_.shape
    dims = len(out)
    if not dims or not inp:
        raise ValueError("input_tensor, output_tensor: expected tensors with at least one dim")
    if dims != len(inp) or (dims > 1 and out[1:] != inp[1:]):
        raise ValueError(
            f"output_tensor: expected the trailing shape {list(inp[1:])} of "
            f"input_tensor, got {list(out[1:])}"
        )
    return (
        _splits("output_split_sizes", output_split_sizes, out[0], size),
        _splits("input_split_sizes", input_split_sizes, inp[0], size),
    )


def _splits(name: str, splits: Sequence[int] | None, rows: int, size: int) -> list[int] | None:
    """``splits`` as a list if it has ``size`` sizes >= 0 adding up to ``rows``."""
    if splits is None:
        if rows % size:
            tensor = name.replace("_split_sizes", "_tensor")
            raise ValueError(
                f"{tensor}: expected dim 0 to split evenly over the gang of {size} "
                f"(or {name}), got {rows} rows"
            )
        return None
    # The common case in a few C-level calls: a list of ints (their sum is an int) >= 0.
    if type(splits) is list and len(splits) == size:
        try:
            total = sum(splits)
            if type(total) is int and total == rows and min(splits) >= 0:
                return splits
        except TypeError:
            pass  # not numbers: the slow path says which

    return _explain_splits(name, splits, rows, size)


def _explain_splits(name: str, splits: object, rows: int, size: int) -> list[int]:
    """The slow path of :func:`_splits`: accept other sequences of ints, else say what is wrong."""
    tensor = name.replace("_split_sizes", "_tensor")
    if isinstance(splits, (str, bytes)) or not isinstance(splits, Sequence):
        raise InvalidTypeError(f"{name}: expected a sequence of {size} ints, got {splits!r}")
    checked = [check_int(f"{name}[{i}]", s) for i, s in enumerate(splits)]
    if len(checked) != size:
        raise ValueError(f"{name}: expected {size} sizes (one per gang rank), got {len(checked)}")
    if any(s < 0 for s in checked):
        raise ValueError(f"{name}: expected sizes >= 0, got {checked}")
    if sum(checked) != rows:
        raise ValueError(
            f"{name}: expected sizes that add up to the {rows} rows of {tensor}, "
            f"got {checked} (sum {sum(checked)})"
        )
    return checked


def _check_pair(output: Tensor, input_: Tensor) -> None:
    if output.dtype is not input_.dtype:
        raise InvalidTypeError(
            f"output_tensor: expected dtype {input_.dtype} like input_tensor, got {output.dtype}"
        )
    if not output.is_contiguous():
        raise ValueError("output_tensor: expected a contiguous tensor")
