"""Every use of torch.distributed's private state, in one place, each with its reason.

Each helper names the public API that would replace it. The test suite runs these
helpers on every supported torch version (tests/unit/test_c10d.py), so a torch
release that moves them fails loudly instead of hanging.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, TypeVar, cast

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup

_F = TypeVar("_F", bound=Callable[..., Any])


_NEW_GROUP_PARAMETERS = frozenset(inspect.signature(dist.new_group).parameters)
"""What this torch's new_group takes: group_desc is there from 2.9.1 on; sort_ranks (not
used: groups gangmesh creates number their members ascending) from 2.13 on."""


def new_group_named(
    ranks: list[int],
    name: int,
    *,
    backend: str,
    timeout: timedelta,
    options: Any | None,
    description: str | None = None,
) -> ProcessGroup:
    """A process group of ``ranks`` (ascending), made by its members only, where torch
    does not split it off the default group (see :func:`splits_new_groups`).

    Every member calls it with the same ``ranks`` and ``name``; no other process
    takes part. The members must agree on the group's name: torch keys the new
    group's rendezvous in the store by it. No torch from 2.9.1 to 2.15.0 lets the
    caller name a group, and none names it alike on members that made different
    groups before: with ``use_local_synchronization=True`` (public) torch hashes the
    ranks salted with the number of groups the process holds (2.9.1 to 2.13) or with
    its job-wide group counter, advanced on members only (2.14 on); without it, torch
    names the group after that counter, which every process of the job must advance
    together. So ``name`` becomes torch's counter for this one call (private:
    ``_world.group_count``) and the counter is put back after, leaving torch's own
    job-wide naming untouched; the group gets the unhashed name ``str(name)``.
    ``description`` reaches torch as ``group_desc`` (shown in its logs and flight
    recorder) where new_group takes it. Public alternative to watch: a
    ``group_name`` argument to ``new_group`` (2.14's ProcessGroup.new_group hook
    already receives one).

    :raises ValueError: ``ranks`` do not ascend.
    :raises RuntimeError: torch named the group otherwise (a torch release changed
        its naming; gangmesh must follow).
    """
    if ranks != sorted(set(ranks)):
        raise ValueError(f"ranks: expected distinct ranks in ascending order, got {ranks}")
    extra: dict[str, Any] = {}
    if description is not None and "group_desc" in _NEW_GROUP_PARAMETERS:
        extra["group_desc"] = description
    world = dist.distributed_c10d._world
    saved = world.group_count
    world.group_count = name
    try:
        with _without_init_barrier():
            group = dist.new_group(
                ranks, timeout=timeout, backend=backend, pg_options=options, **extra
            )
    finally:
        world.group_count = saved
    if not isinstance(group, ProcessGroup) or group.group_name != str(name):
        raise RuntimeError(
            f"torch named a new group {getattr(group, 'group_name', group)!r} instead of "
            f"{name!r}; this torch version names groups in a way gangmesh does not know"
        )
    return group


def splits_new_groups(backend: str) -> bool:
    """Whether torch makes a new group of ``backend`` by splitting the default group's
    communicator, a split that every process of the parent must enter.

    torch splits once the default group is bound to an accelerator (``init_process_group(...,
    device_id=...)`` on any supported torch; every NCCL job on 2.15, whose "nccl" binds one
    itself) whose backend can split, NCCL's. A group of another backend (a gloo twin in an
    NCCL job), and every gloo group (gloo's constructor makes a new one even where torch
    hands it a parent to split), is made by its members alone. Public alternative: none; the
    check is ``_get_split_source`` in distributed_c10d.py, read for every supported version,
    and the bound device's backend is private (``ProcessGroup._get_backend``).
    """
    world = dist.group.WORLD
    device = getattr(world, "bound_device_id", None)
    if not isinstance(world, ProcessGroup) or device is None or device.type == "cpu":
        return False
    if dist.get_backend(world) != backend:
        return False
    try:
        return bool(world._get_backend(device).supports_splitting)
    except RuntimeError:
        return False


def split_group(
    parent: ProcessGroup,
    groups: list[list[int]],
    name: int,
    *,
    timeout: timedelta | None,
    options: Any | None,
    description: str | None,
) -> ProcessGroup | None:
    """This process's group of one split of ``parent``; None where it is in none of ``groups``.

    Every process of ``parent`` calls it, at the same point: torch splits the parent's
    communicator (``ncclCommSplit``), which needs all of them; a process in none of
    ``groups`` (ranks in ``parent``) takes part without a colour. torch 2.9.1 names a split
    group after its job-wide counter, which a split of a gang advances on that gang's
    processes only, so ``name`` stands in for the counter during the call and the counter is
    put back (``_world.group_count``, private, as in :func:`new_group_named`); later torch
    names the group by a hash and leaves the counter alone. Public API:
    ``torch.distributed.split_group`` (experimental); torch 2.15 answers a process outside
    ``groups`` with ``GroupMember.NON_GROUP_MEMBER`` instead of None.
    """
    world = dist.distributed_c10d._world
    saved = world.group_count
    world.group_count = name
    try:
        group = dist.split_group(
            parent, groups, timeout=timeout, pg_options=options, group_desc=description
        )
    finally:
        world.group_count = saved
    return group if isinstance(group, ProcessGroup) else None


@contextlib.contextmanager
def _without_init_barrier() -> Iterator[None]:
    """Turn off TORCH_DIST_INIT_BARRIER for one group: its barrier waits for the whole job,
    and a group made by its members only would wait for processes that never come."""
    saved = os.environ.get("TORCH_DIST_INIT_BARRIER")
    if saved is not None:
        os.environ["TORCH_DIST_INIT_BARRIER"] = "0"
    try:
        yield
    finally:
        if saved is not None:
            os.environ["TORCH_DIST_INIT_BARRIER"] = saved


def split_options(backend: str, timeout: timedelta, high_priority: bool) -> Any | None:
    """Options for a group split off a parent of ``backend``: NCCL's own, new (torch 2.9.1
    otherwise writes the split's name and timeout into the parent's options object); None
    for other backends, whose split copies the parent's (gloo's must name its devices)."""
    return backend_options(backend, timeout, high_priority) if backend == "nccl" else None


def default_store() -> Any:
    """The store torch's default process group was created with.

    Public alternative: none; init_process_group keeps the store it made to itself.
    """
    return dist.distributed_c10d._get_default_store()


def backend_options(backend: str, timeout: timedelta, high_priority: bool = False) -> Any | None:
    """Backend options carrying ``timeout`` (and NCCL's high-priority streams).

    gloo's options class is private; the timeout attribute of both is too. Public
    alternative: the ``timeout`` argument alone, which torch hands to the backend
    only when no options are given.
    """
    options: Any
    if backend == "gloo":
        options = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]
    elif backend == "nccl" and hasattr(dist, "ProcessGroupNCCL"):
        options = dist.ProcessGroupNCCL.Options()
        options.is_high_priority_stream = high_priority
    else:
        return None
    options._timeout = timeout
    return options


def group_timeout(group: ProcessGroup, device: torch.device) -> timedelta | None:
    """The timeout a process group's backend runs with, when the backend tells.

    The "fake" backend reports a default it never uses, so it tells nothing. Public
    alternative: none; ProcessGroup does not expose its backend's options.
    """
    if dist.get_backend(group) == "fake":
        return None
    try:
        timeout = group._get_backend(device).options._timeout
    except (AttributeError, RuntimeError):
        return None
    return timeout if isinstance(timeout, timedelta) else None


def sequence_number(group: ProcessGroup | None) -> int:
    """How many collectives this process entered on ``group`` (the default group where
    None), as torch counts them for every collective on it: gangmesh's, FSDP2's, DTensor's,
    a pipeline's; 0 where torch does not tell. Public alternative: none; torch's flight
    recorder (NCCL, and gloo where recording is on) keeps the same number per call.
    """
    group = group if group is not None else dist.group.WORLD
    try:
        return int(group._get_sequence_number_for_group())  # type: ignore[union-attr]
    except (AttributeError, RuntimeError):
        return 0


def ensure_fake_backend() -> None:
    """Register torch's "fake" backend: groups whose collectives return at once.

    torch ships the backend but registers it only from a testing module. Public
    alternative to watch: "fake" registered by torch.distributed itself.
    """
    import torch.testing._internal.distributed.fake_pg  # noqa: F401


def process_group_method(public: str, private: str) -> Callable[..., Any]:
    """ProcessGroup's method ``public``, or ``private`` where this torch lacks it.

    ``all_gather_single`` and ``reduce_scatter_single`` came after 2.9.1, whose
    ProcessGroup has the same calls as ``_allgather_base`` and ``_reduce_scatter_base``.
    Public alternative: the ``public`` method itself, on every torch that has it.
    """
    method = getattr(ProcessGroup, public, None) or getattr(ProcessGroup, private)
    return cast(Callable[..., Any], method)


def allgather_options() -> Any:
    """New options for a ProcessGroup all-gather call.

    torch.distributed exports the option classes of the other collectives but not this
    one. Public alternative to watch: ``torch.distributed.AllgatherOptions``.
    """
    return dist.distributed_c10d.AllgatherOptions()  # type: ignore[attr-defined]


def undecorated(function: _F) -> _F:
    """A torch collective without its debug-logging decorator, when torch exposes it.

    The decorator only logs a failure at debug level and re-raises it; gangmesh
    raises its own GangError instead, and skipping the wrapper saves more than a
    microsecond per call. Public alternative: the decorated function itself, used
    when ``__wrapped__`` is absent.
    """
    return getattr(function, "__wrapped__", function)


def functional_collective(name: str, older: str | None = None) -> Callable[..., Any]:
    """torch's functional collective ``name``, or ``older`` where this torch lacks it: the
    form of a collective that torch.compile traces on every supported torch, the group
    given by name, the result a new tensor.

    A gang's collectives take them in traced code only (:mod:`gangmesh.runtime._traced`),
    so the module is imported on the first such call. ``all_gather_single`` and
    ``reduce_scatter_single`` came after 2.9.1, whose ``all_gather_tensor`` and
    ``reduce_scatter_tensor`` (deprecated since) take the same arguments. Public
    alternative to watch: the c10d calls (``torch.distributed.all_reduce``, ...) once dynamo
    rewrites every one of them into these ops; it rewrites neither ``broadcast`` nor
    ``barrier`` (2.9.1 to 2.15.0).
    """
    import torch.distributed._functional_collectives as functional

    found = getattr(functional, name, None) or getattr(functional, older or name)
    return cast(Callable[..., Any], found)


def standalone_backend(
    store: Any, rank: int, size: int, device: torch.device, timeout: timedelta
) -> Any:
    """A backend of ``size`` processes that meet in ``store`` (no default group, no world of
    torch's): gloo for a CPU device, NCCL for CUDA; every member calls it with the same store.

    gloo's constructor taking a store, rank, size and timeout is public and picks its
    network interfaces as the default group does (``GLOO_SOCKET_IFNAME``, else the host
    name's address); it connects every pair before it returns. NCCL's timeout is in its
    options (private ``_timeout``, see :func:`backend_options`); it connects at the first
    collective. Public alternative to watch: a ``torch.distributed`` call that makes a group
    outside the default group's world.

    :raises RuntimeError: the peers did not all come within ``timeout`` (gloo).
    """
    if device.type == "cuda":
        options: Any = backend_options("nccl", timeout)
        return dist.ProcessGroupNCCL(store, rank, size, options)
    return dist.ProcessGroupGloo(store, rank, size, timeout)


def rendezvous_keys(device: torch.device, rank: int) -> list[str]:
    """The keys a member of rank ``rank`` of :func:`standalone_backend` leaves in its store,
    which outlive the group: gloo's address of that rank, one per network device
    (``<device>/<rank>``, under the PrefixStore gloo puts it in: torch's ``ProcessGroupGloo``
    numbers the devices); NCCL's unique id, set by rank 0 under the communicator's count
    (``0``). Read in torch 2.9.1 to 2.15.0's ProcessGroupGloo.cpp and ProcessGroupNCCL.cpp;
    tests/unit/test_c10d.py checks gloo's on every supported torch. Public alternative: none
    (no store lists its keys on every supported torch)."""
    if device.type == "cuda":
        return ["0"] if rank == 0 else []
    interfaces = [name for name in os.environ.get("GLOO_SOCKET_IFNAME", "").split(",") if name]
    return [f"{index}/{rank}" for index in range(max(1, len(interfaces)))]
