"""Argument checks that need no torch; each error names the argument and what was expected."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import timedelta

import numpy as np


class InvalidTypeError(TypeError, ValueError):
    """An argument of the wrong type.

    It is also a ValueError, so ``except ValueError`` catches every rejected argument.
    """


def is_int(value: object) -> bool:
    """True for ints and numpy integers, False for bools."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_int(name: str, value: object) -> int:
    """Return ``value`` as an int; InvalidTypeError naming ``name`` otherwise."""
    if not is_int(value):
        raise InvalidTypeError(f"{name}: expected an int, got {value!r}")
    return int(value)  # type: ignore[call-overload, no-any-return]


def check_flag(name: str, value: object) -> bool:
    """Return ``value`` if it is a bool; InvalidTypeError naming ``name`` otherwise."""
    if not isinstance(value, bool):
        raise InvalidTypeError(f"{name}: expected True or False, got {value!r}")
    return value


MAX_WORLD_SIZE = 2**62
"""The largest world a plan lays out: rank arithmetic stays within int64."""

MAX_LISTED_RANKS = 2**26
"""The largest world whose every group a plan lists at once (512 MiB of int64 ranks);
larger worlds are answered per rank."""


def check_world_size(value: object) -> int:
    """Return ``value`` if it is a world size a plan can lay out."""
    world = check_positive("world_size", value)
    if world > MAX_WORLD_SIZE:
        raise ValueError(f"world_size: expected at most 2**62 processes, got {world}")
    return world


def check_listable(name: str, count: int, what: str) -> None:
    """Raise, naming argument ``name``, unless ``what`` may list ``count`` ranks at once."""
    if count > MAX_LISTED_RANKS:
        raise ValueError(
            f"{name}: {what} lists {count} ranks, more than the {MAX_LISTED_RANKS} (2**26) a "
            f"plan lists at once; ask per rank (group_of, rank_in, coordinate)"
        )


def check_positive(name: str, value: object) -> int:
    """Return ``value`` if it is an int >= 1; ValueError/TypeError otherwise."""
    number = check_int(name, value)
    if number < 1:
        raise ValueError(f"{name}: expected an int >= 1, got {number}")
    return number


def check_count(name: str, value: object) -> int:
    """Return ``value`` if it is an int >= 0; ValueError/TypeError otherwise."""
    number = check_int(name, value)
    if number < 0:
        raise ValueError(f"{name}: expected an int >= 0, got {number}")
    return number


def check_index(name: str, value: object, size: int, what: str = "an int") -> int:
    """Return ``value`` if it is an int in ``[0, size)``; ``what`` names such a value."""
    number = check_int(name, value)
    if not 0 <= number < size:
        raise ValueError(f"{name}: expected {what} in [0, {size}), got {number}")
    return number


def check_ranks(ranks: Sequence[int], size: int) -> list[int]:
    """Return ``ranks`` as a list if they are unique ranks of a gang of ``size``."""
    if isinstance(ranks, (str, bytes)) or not isinstance(ranks, Sequence):
        raise InvalidTypeError(f"ranks: expected a sequence of ints, got {ranks!r}")
    checked = [check_index(f"ranks[{i}]", r, size) for i, r in enumerate(ranks)]
    if not checked:
        raise ValueError("ranks: expected at least one rank, got an empty sequence")
    dupes = sorted(r for r, n in Counter(checked).items() if n > 1)
    if dupes:
        raise ValueError(f"ranks: expected unique ranks, got duplicates {dupes} in {checked}")
    return checked


def check_rank_order(name: str, ranks: object, world_size: int) -> np.ndarray:
    """Return ``ranks`` as an int64 array if it is a permutation of ``range(world_size)``
    that keeps rank 0 first (at the origin of a mesh)."""
    order = np.asarray(ranks, dtype=np.int64).reshape(-1)
    if len(order) != world_size or not np.array_equal(np.sort(order), np.arange(world_size)):
        shown = str(order[:8].tolist())[:-1] + (", ...]" if len(order) > 8 else "]")
        raise ValueError(f"{name}: expected a permutation of range({world_size}), got {shown}")
    if order[0] != 0:
        raise ValueError(f"{name}: expected rank 0 first (at the mesh origin), got {order[0]}")
    return order


def check_timeout(timeout: object, name: str = "timeout") -> timedelta | None:
    """Return ``timeout`` if it is None or a positive timedelta.

    :raises InvalidTypeError: ``timeout`` is not a timedelta (a number of seconds, say).
    :raises ValueError: ``timeout`` is zero or negative.
    """
    return None if timeout is None else check_duration(name, timeout)


def check_duration(name: str, value: object) -> timedelta:
    """Return ``value`` if it is a positive timedelta, naming ``name`` otherwise.

    >>> check_duration("timeout", timedelta(seconds=-5))
    Traceback (most recent call last):
    ...
    ValueError: timeout: expected a positive datetime.timedelta, got -5 s

    :raises InvalidTypeError: ``value`` is not a timedelta (a number of seconds, say).
    :raises ValueError: ``value`` is zero or negative.
    """
    if not isinstance(value, timedelta):
        raise InvalidTypeError(
            f"{name}: expected a datetime.timedelta such as timedelta(seconds=60), got "
            f"{value!r} ({type(value).__name__})"
        )
    if value <= timedelta(0):
        raise ValueError(
            f"{name}: expected a positive datetime.timedelta, got {value.total_seconds():g} s"
        )
    return value
