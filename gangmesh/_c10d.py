"""Every use of torch.distributed's private state, in one place, each with its reason.

Each helper names the public API that would replace it. The test suite runs these
helpers on every supported torch version (tests/unit/test_c10d.py), so a torch
release that moves them fails loudly instead of hanging.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup
from torch.distributed.device_mesh import DeviceMesh

_F = TypeVar("_F", bound=Callable[..., Any])


def new_group_named(
    ranks: list[int],
    name: int,
    *,
    backend: str,
    timeout: timedelta,
    options: Any | None,
) -> ProcessGroup:
    """A process group of ``ranks`` (in this order), made by its members only.

    Every member calls it with the same ``ranks`` and ``name``; no other process
    takes part. torch names a new group either after a job-wide counter, which
    every process of the job must advance together, or after a hash salted with
    per-process counts that differ between members once groups were made by parts
    of the job (torch 2.13 salts with the number of groups a process holds; 2.14
    with the counter, which it then advances on members only). Either way members
    can disagree and wait for each other forever. The members agree on ``name``, so
    it becomes torch's counter for this one call and the counter is put back after,
    leaving torch's own job-wide naming untouched. Public alternative to watch: a
    ``group_name`` argument to ``new_group``.

    :raises RuntimeError: torch named the group otherwise (a torch release changed
        its naming; gangmesh must follow).
    """
    world = dist.distributed_c10d._world
    saved = world.group_count
    world.group_count = name
    try:
        with _without_init_barrier():
            group = dist.new_group(
                ranks, timeout=timeout, backend=backend, pg_options=options, sort_ranks=False
            )
    finally:
        world.group_count = saved
    if not isinstance(group, ProcessGroup) or group.group_name != str(name):
        raise RuntimeError(
            f"torch named a new group {getattr(group, 'group_name', group)!r} instead of "
            f"{name!r}; this torch version names groups in a way gangmesh does not know"
        )
    return group


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


def ensure_fake_backend() -> None:
    """Register torch's "fake" backend: groups whose collectives return at once.

    torch ships the backend but registers it only from a testing module. Public
    alternative to watch: "fake" registered by torch.distributed itself.
    """
    import torch.testing._internal.distributed.fake_pg  # noqa: F401


def register_flattened(
    mesh: DeviceMesh, name: str, dims: tuple[str, ...], group: ProcessGroup
) -> None:
    """Give the root ``mesh`` a flattened dimension ``name`` over ``dims``, backed by ``group``.

    ``DeviceMesh._flatten`` would make a new group for every flattened set of
    ranks, even where one with the same members exists. This builds the same
    flattened mesh around a group gangmesh already holds. It slices the layout
    itself: on torch 2.14 ``mesh[dims]`` imports ``torch._dynamo``, and that import
    keeps the default group (and its threads) alive until the interpreter ends.
    Public alternative to watch: a way to hand ``_flatten`` existing groups.
    """
    sliced = mesh._get_slice_mesh_layout(dims)
    flat = DeviceMesh(
        mesh.device_type,
        _layout=type(sliced)([sliced.collapse()]),
        _rank_map=mesh._rank_map,
        mesh_dim_names=(name,),
        _root_mesh=mesh,
        _init_backend=False,
    )
    flat._dim_group_names = [group.group_name]
    mesh._pg_registry[group.group_name] = group
    mesh._flatten_mapping[name] = flat


def undecorated(function: _F) -> _F:
    """A torch collective without its debug-logging decorator, when torch exposes it.

    The decorator only logs a failure at debug level and re-raises it; gangmesh
    raises its own GangError instead, and skipping the wrapper saves more than a
    microsecond per call. Public alternative: the decorated function itself, used
    when ``__wrapped__`` is absent.
    """
    return getattr(function, "__wrapped__", function)
