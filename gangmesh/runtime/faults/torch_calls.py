"""torch's own collectives on gangmesh's groups: a failure there is named as a gang call's is.

FSDP2's all-gathers and reduce-scatters, DTensor's redistributions, tensor parallel's
all-reduces and a pipeline's sends and receives run on the groups gangmesh made or wraps, but
not through a Gang: where a peer breaks, torch raises its own error (on gloo, in the thread
that waits). :func:`consequence` reads such an error once it reaches gangmesh (leaving
``with gangs:``, or uncaught, in the process's last words): which collective it was (the
innermost torch.distributed call in its traceback, that call's group, and torch's count of
the group's collectives), and who broke it, from the job's failure reports as for a gang's
call. Nothing runs while collectives succeed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import PurePath
from types import TracebackType

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup

import gangmesh.runtime.faults.failure_reports as failure_reports
import gangmesh.runtime.faults.torch_errors as torch_errors
from gangmesh.runtime import _c10d, communicators
from gangmesh.runtime.faults.blame import as_kind_of, gang_error
from gangmesh.runtime.faults.culprits import Call
from gangmesh.runtime.gang import GangError

_C10D = ("torch", "distributed", "distributed_c10d.py")
_COLLECTIVES = frozenset(
    {
        "all_gather", "all_gather_coalesced", "all_gather_into_tensor", "all_gather_object",
        "all_gather_single", "all_reduce", "all_reduce_coalesced", "all_to_all",
        "all_to_all_single", "barrier", "batch_isend_irecv", "broadcast",
        "broadcast_object_list", "gather", "gather_into_tensor", "gather_object",
        "gather_single", "irecv", "isend", "monitored_barrier", "recv", "recv_object_list",
        "reduce", "reduce_scatter", "reduce_scatter_single", "reduce_scatter_tensor",
        "scatter", "scatter_object_list", "send", "send_object_list",
    }
)  # fmt: skip
"""torch.distributed's collectives and point-to-point calls (2.9.1 to 2.15.0): a failure
inside one of them is a collective's; one in ``new_group`` or a store call is not."""
_CALLERS = (
    (("torch", "distributed", "fsdp"), "FSDP2's"),
    (("torch", "distributed", "tensor"), "DTensor's"),
    (("torch", "distributed", "pipelining"), "the pipeline schedule's"),
    (("torch", "distributed", "algorithms"), "DDP's"),
    (("torch", "nn", "parallel"), "DDP's"),
)
"""Where torch's frames say whose collective it was, by the path of their file."""
_FUNCTIONAL = ("torch", "distributed", "_functional_collectives.py")
"""Where torch waits on a functional collective (DTensor's, tensor parallel's): its group is
not kept anywhere the traceback shows."""
_OPS = {
    "all_gather_into_tensor": "all_gather",
    "all_gather_single": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_single": "reduce_scatter",
    "all_to_all_single": "all_to_all",
}
"""torch's names of one collective, which differ by release, as a Gang names it."""
_WRAPPERS = frozenset({"wrapper", "_fn", "decorate_context", "inner"})
"""Names of torch's decorators' frames, which say nothing of where a call was made."""


@dataclass(frozen=True)
class TorchCall:
    """A torch collective in a failed traceback: its name, group, and who called it."""

    op: str
    group: ProcessGroup | None
    """The group the call ran on; None where not known."""
    caller: str
    """Whose collective it was, in words ("FSDP2's"), or ""."""
    function: str
    """The function of torch's that waited for it, where not a torch.distributed call."""
    called: bool = False
    """Whether the traceback runs through one of torch.distributed's collectives."""


def consequence(error: BaseException) -> GangError | None:
    """The GangError that names who broke the collective ``error`` (torch's) failed in, where
    it is one that followed a peer's failure; None otherwise (a GangError already, an error of
    this process's own, or a process that reports no failures: no launcher's store). An error
    torch raised around another (a pipeline stage's) is read as the one inside. The error is
    also an instance of ``error``'s own type (see :func:`gangmesh.runtime.gang.GangError`),
    so that a program's ``except`` clauses for torch's errors still catch it."""
    error = torch_errors.unwrapped(error)
    if isinstance(error, GangError):
        return None
    channel = failure_reports.channel()
    if channel is None:
        return None
    found = torch_call(error.__traceback__)
    if not _of_a_collective(error, found):
        return None
    members, rank = _place(found.group)
    where = f" ({found.caller}, in {found.function})" if found.caller else ""
    if rank < 0:  # a wait on torch's work, which names no group: the groups that hold the
        # ranks found tell which it was
        members, rank = list(range(channel.world_size)), channel.rank

        def what(named: tuple[int, ...]) -> str:
            return f"{found.op} failed{_holding(named)}{where}"

        named = gang_error(what, members, rank, failure_reports.job_timeout(), error, known=False)
        return as_kind_of(named, error)
    label = group_label(found.group)
    call = Call(label, tuple(members), _c10d.sequence_number(found.group), found.op)
    said = f"{found.op} failed on process group '{label}' (size {len(members)}, rank {rank})"
    named = gang_error(said + where, members, rank, timeout_of(found.group), error, call=call)
    return as_kind_of(named, error)


def _of_a_collective(error: BaseException, found: TorchCall) -> bool:
    """Whether ``error`` was raised by a collective on a group gangmesh holds: inside one of
    torch.distributed's collectives on such a group (any of torch's distributed errors), or,
    where no collective's call is in the traceback (torch's code, or the program, waiting on
    a collective's work), an error a backend raises there (DistBackendError, or gloo's and
    c10d's own text); never a store's error in the program's own calls."""
    if not torch_errors.from_a_backend(error):
        return False
    if found.called:
        return found.group is not None and held(found.group)
    return isinstance(error, dist.DistBackendError) or torch_errors.backend_text(error)


def held(group: ProcessGroup) -> bool:
    """Whether gangmesh made or wraps ``group``: one of its communicators, or the default group."""
    return group is dist.group.WORLD or any(group is g for g in communicators.held_groups())


def _holding(ranks: tuple[int, ...]) -> str:
    """`` on process group 'tp' (size 2, rank 0; ...)``: the smallest of the groups gangmesh
    holds in this process that holds every one of ``ranks``, where a collective's group is not
    known; "" where no group holds them."""
    if not ranks:
        return ""
    found: list[tuple[int, bool, str, int]] = []  # a dimension's group before the default one
    for group in [dist.group.WORLD, *communicators.held_groups()]:
        members, rank = _place(group)
        if rank >= 0 and set(ranks) <= set(members):
            found.append((len(members), group is dist.group.WORLD, group_label(group), rank))
    if not found:
        return ""
    size, _, label, rank = min(found)
    return f" on process group '{label}' (size {size}, rank {rank}; the smallest holding them)"


def _place(group: ProcessGroup | None) -> tuple[list[int], int]:
    """The global ranks of ``group`` and this process's rank in it; -1 where not known."""
    if group is None:
        return [], -1
    try:
        return dist.get_process_group_ranks(group), dist.get_rank(group)
    except (RuntimeError, ValueError):  # not a group of this job's, or torch is down
        return [], -1


def torch_call(tb: TracebackType | None) -> TorchCall:
    """The innermost torch.distributed collective of traceback ``tb``, with its group (None
    where the error came from waiting on its work, which names none), and whose it was: the
    part of torch nearest the call (FSDP2 inside a pipeline stage: FSDP2's), with that part's
    outermost frame."""
    op, group, caller, function, called = "a collective", None, "", "", False
    while tb is not None:
        frame = tb.tb_frame
        code = frame.f_code
        parts = PurePath(code.co_filename).parts
        if _under(parts, _C10D) and code.co_name in _COLLECTIVES:
            op, called = _OPS.get(code.co_name, code.co_name), True
            named = frame.f_locals.get("group", False)  # None: the default group
            group = dist.group.WORLD if named is None else named
            group = group if isinstance(group, ProcessGroup) else None
        if _under(parts, _FUNCTIONAL):  # a wait on a functional collective's result
            op = op if called else "a functional collective"
        else:
            whose = next((whose for path, whose in _CALLERS if _under(parts, path)), "")
            if whose and whose != caller and code.co_name not in _WRAPPERS:  # nearer the call
                caller, function = whose, code.co_name
        tb = tb.tb_next
    return TorchCall(op, group, caller, function, called)


def _under(parts: tuple[str, ...], path: tuple[str, ...]) -> bool:
    """Whether a file's path ``parts`` runs through ``path`` (a file, or a folder's names)."""
    size = len(path)
    return any(parts[i : i + size] == path for i in range(len(parts) - size + 1))


def group_label(group: ProcessGroup | None) -> str:
    """The name gangmesh gave ``group`` (the dimension or gang, e.g. "dp_shard_cp"); torch's
    description of a group gangmesh did not make; "default" for the default group."""
    if group is None or group is dist.group.WORLD:
        return "default"
    description = str(getattr(group, "group_desc", "") or "")
    if description.startswith("gangmesh:"):
        return description.split(":")[1]
    return description or group.group_name


def timeout_of(group: ProcessGroup | None) -> timedelta:
    """The timeout ``group`` runs with, where its backend tells; else the job's."""
    for device in _devices(group):
        timeout = _c10d.group_timeout(group, device) if group is not None else None
        if timeout is not None:
            return timeout
    return failure_reports.job_timeout()


def _devices(group: ProcessGroup | None) -> list[torch.device]:
    """Where ``group``'s backend may run: its bound device, else cpu and cuda."""
    bound = getattr(group, "bound_device_id", None)
    return [bound] if bound is not None else [torch.device("cpu"), torch.device("cuda")]
