"""One communicator per distinct set of ranks: the process groups gangmesh holds in a process.

Gangs that need a group with the same members (in the same order), backend, timeout
and stream priority share one torch process group. Each holder takes a lease; the
group is destroyed when the last lease is released, and only if gangmesh created it.
Groups gangmesh was lent (the default group it wraps, the groups of a user's mesh)
are never destroyed by it. New groups are made as torch requires: as one split of a
parent that every process of the parent enters where torch splits communicators
(:meth:`Registry.split`), else by their members alone.
"""

from __future__ import annotations

import hashlib
import logging
import weakref
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import NamedTuple, overload

import torch.distributed as dist
from torch.distributed import ProcessGroup

from gangmesh.runtime import _c10d
from gangmesh.runtime.backends import leading_backend

log = logging.getLogger("gangmesh")


class CommunicatorKey(NamedTuple):
    """What makes two groups interchangeable."""

    ranks: tuple[int, ...]
    backend: str
    timeout: timedelta
    high_priority: bool


class Parent(NamedTuple):
    """A group new groups are split off, with the timeout and stream priority it runs with
    (a split that makes no group for a process keeps them)."""

    group: ProcessGroup
    timeout: timedelta
    high_priority: bool


@dataclass(frozen=True)
class CommunicatorInfo:
    """One communicator of this process: its members, users, backend and timeout."""

    ranks: tuple[int, ...]
    """Global ranks of the members, in group rank order."""
    gangs: tuple[str, ...]
    """Names of the gangs (and mesh dimensions) that share it."""
    backend: str
    """The torch.distributed backend, such as "gloo" or "nccl"."""
    timeout: timedelta
    """Timeout of its collectives."""
    created: bool
    """True if gangmesh created it; False if it wraps a group it was lent."""


@dataclass(eq=False)
class _Entry:
    group: ProcessGroup | None
    key: CommunicatorKey
    created: bool
    holders: int = 0

    def __post_init__(self) -> None:
        _entries.add(self)


_entries: weakref.WeakSet[_Entry] = weakref.WeakSet()
"""Every entry still referenced, so that :func:`forget_all` can drop their groups."""


@dataclass
class Lease:
    """A hold on a shared group; :meth:`release` gives it back (once)."""

    key: CommunicatorKey
    _entry: _Entry | None = field(repr=False)
    _registry: Registry = field(repr=False)

    @property
    def group(self) -> ProcessGroup:
        """The group held.

        :raises RuntimeError: the lease was released, or torch.distributed shut down.
        """
        group = None if self._entry is None else self._entry.group
        if group is None:
            raise RuntimeError(f"the group of ranks {self.key.ranks} is no longer held")
        return group

    def release(self) -> None:
        """Give the group back; destroy it if this was the last lease on a created group."""
        entry, self._entry = self._entry, None
        if entry is None:
            return
        entry.holders -= 1
        if entry.holders == 0:
            self._registry.forget(entry)


class Registry:
    """The groups of one default process group, keyed by what makes them interchangeable."""

    def __init__(self, world: ProcessGroup | None) -> None:
        self._world = None if world is None else weakref.ref(world)
        self._entries: dict[CommunicatorKey, _Entry] = {}

    @property
    def world(self) -> ProcessGroup | None:
        """The default group of these groups (held weakly: it belongs to its creator)."""
        return None if self._world is None else self._world()

    def acquire(self, key: CommunicatorKey, label: str = "gang") -> Lease:
        """A lease on the group for ``key``, created by this call if there is none yet.

        Every member of ``key.ranks`` calls it in the same order; no other process does.
        ``label`` (the gang's name) goes into the description torch logs for a new group.
        """
        entry = self._entries.get(key)
        if entry is None:
            entry = _Entry(self._create(key, label), key, created=True)
            self._entries[key] = entry
        return self._lease(entry)

    @overload
    def split(
        self,
        parent: Parent,
        groups: Sequence[Sequence[int]],
        mine: CommunicatorKey,
        label: str = ...,
        needed: bool = ...,
    ) -> Lease: ...

    @overload
    def split(
        self,
        parent: Parent,
        groups: Sequence[Sequence[int]],
        mine: None,
        label: str = ...,
        needed: bool = ...,
    ) -> None: ...

    def split(
        self,
        parent: Parent,
        groups: Sequence[Sequence[int]],
        mine: CommunicatorKey | None,
        label: str = "gang",
        needed: bool = True,
    ) -> Lease | None:
        """A lease on this process's group of ``groups``, made as one split of ``parent``.

        Every process of ``parent`` calls it at the same point with the same ``groups``
        (global ranks, ascending, disjoint); ``mine`` is the key of the caller's group, None
        for a process in none of them. Where torch splits new groups off the default
        group's communicator (:func:`gangmesh.runtime._c10d.splits_new_groups`), every process of
        ``parent`` enters one split, a process that holds its group already or has none
        without a colour; elsewhere each group is made by its members alone, as
        :meth:`acquire` makes it. The members of a group agree on whether they hold it:
        they made it together, and release it together. A split without a colour gets new
        options with the parent's own timeout and priority: torch 2.9.1 otherwise resets the
        parent's NCCL timeout to the default (it writes into the parent's options object).
        ``needed`` False (every process of ``parent`` agreed that each member holds its
        group already): nobody splits.
        """
        backend = dist.get_backend(parent.group) if mine is None else mine.backend
        if not _c10d.splits_new_groups(backend):
            return None if mine is None else self.acquire(mine, label)
        held = None if mine is None else self._entries.get(mine)
        parent_ranks = dist.get_process_group_ranks(parent.group)
        whole = held is not None and len(held.key.ranks) == len(parent_ranks)
        if not groups or not needed or whole:
            if mine is not None and held is None:
                raise RuntimeError(f"no split of ranks {parent_ranks} makes ranks {mine.ranks}")
            return None if held is None else self._lease(held)  # nobody splits
        others = [list(g) for g in groups if held is None or tuple(g) != held.key.ranks]
        if not others and held is not None:  # the one group is this one, held: no colour
            others = [[next(r for r in parent_ranks if r not in held.key.ranks)]]
        if parent.group is not dist.group.WORLD:
            others = [[dist.get_group_rank(parent.group, r) for r in g] for g in others]
        if mine is None or held is not None:
            _c10d.split_group(
                parent.group,
                others,
                0,
                timeout=parent.timeout,
                options=_options(backend, parent.timeout, parent.high_priority),
                description=None,
            )
            return None if held is None else self._lease(held)
        log.debug("splitting a %s group of ranks %s", mine.backend, mine.ranks)
        group = _c10d.split_group(
            parent.group,
            others,
            _group_name(mine),
            timeout=mine.timeout,
            options=_options(mine.backend, mine.timeout, mine.high_priority),
            description=_description(label, mine.ranks),
        )
        if group is None:
            raise RuntimeError(f"torch made no group of ranks {mine.ranks} in a split")
        entry = _Entry(group, mine, created=True)
        self._entries[mine] = entry
        return self._lease(entry)

    def _lease(self, entry: _Entry) -> Lease:
        """One more hold on ``entry``."""
        entry.holders += 1
        return Lease(entry.key, entry, self)

    def lend(self, group: ProcessGroup, key: CommunicatorKey) -> Lease:
        """A lease on a group gangmesh was lent; other gangs with ``key`` will share it."""
        entry = self._entries.get(key)
        if entry is None or entry.group is not group:
            entry = _Entry(group, key, created=False)
            self._entries.setdefault(key, entry)
        return self._lease(entry)

    def holds(self, key: CommunicatorKey) -> bool:
        """Whether a group for ``key`` is held."""
        return key in self._entries

    def created(self, group: ProcessGroup) -> bool:
        """Whether gangmesh created ``group`` (False for groups it was lent or does not know)."""
        return any(e.group is group and e.created for e in self._entries.values())

    def held(self) -> list[ProcessGroup]:
        """Every group held, created or lent."""
        return [e.group for e in self._entries.values() if e.group is not None]

    def forget(self, entry: _Entry) -> None:
        """Drop an entry nobody holds; destroy its group if gangmesh created it."""
        if self._entries.get(entry.key) is entry:
            del self._entries[entry.key]
        group, entry.group = entry.group, None
        if group is not None and entry.created and self.world is dist.group.WORLD is not None:
            try:
                dist.destroy_process_group(group)
            except (RuntimeError, ValueError) as ex:
                log.debug("destroying the group of ranks %s failed: %s", entry.key.ranks, ex)

    def _create(self, key: CommunicatorKey, label: str) -> ProcessGroup:
        name = _group_name(key)
        log.debug("creating a %s group of ranks %s", key.backend, key.ranks)
        return _c10d.new_group_named(
            list(key.ranks),
            name,
            backend=key.backend,
            timeout=key.timeout,
            options=_c10d.backend_options(
                leading_backend(key.backend), key.timeout, key.high_priority
            ),
            description=_description(label, key.ranks),
        )


def _options(backend: str, timeout: timedelta, high_priority: bool) -> object | None:
    """New options for a split of a ``backend`` parent (see :func:`_c10d.split_options`)."""
    return _c10d.split_options(leading_backend(backend), timeout, high_priority)


_generations: Counter[tuple[tuple[int, ...], str]] = Counter()
_current: Registry = Registry(None)


def _group_name(key: CommunicatorKey) -> int:
    """A name the members of a new group agree on, never used before in this process.

    The members made the same groups before (they call create_gangs and create_gang
    together), so they count the same number of earlier groups with these ranks.
    """
    generation = _generations[key.ranks, key.backend]
    _generations[key.ranks, key.backend] += 1
    text = f"{','.join(map(str, key.ranks))}|{key.backend}|{generation}"
    digest = int(hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:15], 16)
    return 2**62 + digest


def _description(label: str, ranks: tuple[int, ...]) -> str:
    """What torch shows for a group in its logs and flight recorder: ``gangmesh:tp:0,1``."""
    return f"gangmesh:{label}:{_ranks_text(ranks)}"


def _ranks_text(ranks: tuple[int, ...], limit: int = 8) -> str:
    """``"0,2,4,6"``; long groups as their first ranks, "..." and the last."""
    shown = ranks if len(ranks) <= limit else (*ranks[: limit - 1], "...", ranks[-1])
    return ",".join(map(str, shown))


def _registry() -> Registry:
    """The registry of the current default group; a new one once that group changed."""
    global _current
    world = dist.group.WORLD if dist.is_initialized() else None
    if _current.world is not world:
        _current = Registry(world)
    return _current


def forget_all() -> None:
    """Drop every reference to a group without destroying it (torch.distributed is down)."""
    global _current
    for entry in list(_entries):
        entry.group = None
    _current = Registry(None)


def acquire(key: CommunicatorKey, label: str = "gang") -> Lease:
    """A lease on the shared group for ``key`` (see :meth:`Registry.acquire`)."""
    return _registry().acquire(key, label)


@overload
def split(
    parent: Parent,
    groups: Sequence[Sequence[int]],
    mine: CommunicatorKey,
    label: str = ...,
    needed: bool = ...,
) -> Lease: ...


@overload
def split(
    parent: Parent,
    groups: Sequence[Sequence[int]],
    mine: None,
    label: str = ...,
    needed: bool = ...,
) -> None: ...


def split(
    parent: Parent,
    groups: Sequence[Sequence[int]],
    mine: CommunicatorKey | None,
    label: str = "gang",
    needed: bool = True,
) -> Lease | None:
    """A lease on this process's group of one split of ``parent`` (see :meth:`Registry.split`)."""
    return _registry().split(parent, groups, mine, label, needed)


def holds(key: CommunicatorKey) -> bool:
    """Whether this process holds a group for ``key`` already."""
    return _registry().holds(key)


def lend(group: ProcessGroup, key: CommunicatorKey) -> Lease:
    """A lease on a group gangmesh was lent (see :meth:`Registry.lend`)."""
    return _registry().lend(group, key)


def created_by_gangmesh(group: ProcessGroup) -> bool:
    """Whether gangmesh created ``group``."""
    return _registry().created(group)


def held_groups() -> list[ProcessGroup]:
    """Every group gangmesh holds in this process: those it created and those it was lent
    (the default group it wraps, the groups of a user's mesh)."""
    return _registry().held()
