"""Argument checks shared by the public API; each error names the argument."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type; caught by ``except TypeError`` and ``except ValueError``."""


def is_int(value: object) -> bool:
    """True for ints and numpy integers, False for bools."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_int(name: str, value: object) -> int:
    """Return ``value`` as an int; ArgumentTypeError naming ``name`` otherwise."""
    if not is_int(value):
        raise ArgumentTypeError(f"{name}: expected an int, got {value!r}")
    return int(value)  # type: ignore[call-overload, no-any-return]


def check_positive(name: str, value: object) -> int:
    """Return ``value`` if it is an int >= 1; ValueError/TypeError otherwise."""
    number = check_int(name, value)
    if number < 1:
        raise ValueError(f"{name}: expected an int >= 1, got {number}")
    return number


def check_index(name: str, value: object, size: int) -> int:
    """Return ``value`` if it is an int in ``[0, size)``."""
    number = check_int(name, value)
    if not 0 <= number < size:
        raise ValueError(f"{name}: expected an int in [0, {size}), got {number}")
    return number


def check_ranks(ranks: Sequence[int], size: int) -> list[int]:
    """Return ``ranks`` as a list if they are unique ranks of a gang of ``size``."""
    if isinstance(ranks, (str, bytes)) or not isinstance(ranks, Sequence):
        raise TypeError(f"ranks: expected a sequence of ints, got {ranks!r}")
    checked = [check_index(f"ranks[{i}]", r, size) for i, r in enumerate(ranks)]
    if not checked:
        raise ValueError("ranks: expected at least one rank, got an empty sequence")
    dupes = sorted(r for r, n in Counter(checked).items() if n > 1)
    if dupes:
        raise ValueError(f"ranks: expected unique ranks, got duplicates {dupes} in {checked}")
    return checked


def check_tensor(name: str, tensor: object, device: torch.device) -> Tensor:
    """Return ``tensor`` if it is a tensor on ``device``."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(tensor).__name__}")
    if not same_device(tensor.device, device):
        raise ValueError(
            f"{name}: expected a tensor on the gang's device {device}, got {tensor.device}"
        )
    return tensor


def same_device(actual: torch.device, expected: torch.device) -> bool:
    """Whether a tensor on ``actual`` may be used on a gang of ``expected``."""
    if actual.type != expected.type:
        return False
    return expected.index is None or actual.index is None or actual.index == expected.index


def check_gather_output(output: Tensor, input_: Tensor, size: int) -> None:
    """Check the output of all_gather against the accepted shapes."""
    if output.dtype != input_.dtype:
        raise TypeError(
            f"output_tensor: expected dtype {input_.dtype} like input_tensor, got {output.dtype}"
        )
    if not output.is_contiguous():
        raise ValueError("output_tensor: expected a contiguous tensor")
    shape = tuple(input_.shape)
    accepted = [(size, *shape), (size * input_.numel(),)]
    if shape:
        accepted.append((size * shape[0], *shape[1:]))
    if tuple(output.shape) not in accepted:
        expected = " or ".join(str(list(s)) for s in dict.fromkeys(accepted))
        raise ValueError(f"output_tensor: expected shape {expected}, got {list(output.shape)}")


def check_gather_outputs(outputs: object, input_: Tensor, size: int, device: torch.device) -> None:
    """Check the output list of all_gather_to_list."""
    if not isinstance(outputs, list):
        raise TypeError(f"output_tensors: expected a list of tensors, got {type(outputs).__name__}")
    if len(outputs) != size:
        raise ValueError(
            f"output_tensors: expected {size} tensors (the gang size), got {len(outputs)}"
        )
    for i, output in enumerate(outputs):
        check_tensor(f"output_tensors[{i}]", output, device)
        if output.shape != input_.shape or output.dtype != input_.dtype:
            raise ValueError(
                f"output_tensors[{i}]: expected shape {list(input_.shape)} and dtype "
                f"{input_.dtype} like input_tensor, got {list(output.shape)} and {output.dtype}"
            )
