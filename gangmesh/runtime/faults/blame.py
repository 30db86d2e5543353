"""The GangError of a failure, naming who broke it where the job's failure reports tell."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

import gangmesh.runtime.faults.error_files as error_files
import gangmesh.runtime.faults.failure_reports as failure_reports
import gangmesh.runtime.faults.torch_errors as torch_errors
from gangmesh.runtime.faults.culprits import Call
from gangmesh.runtime.gang import GangError

_CULPRITS_END = 3.0
"""Seconds a survivor under torchrun waits for the culprits it named on its host to end
before it raises: a survivor that then ends at once (``os._exit``) ends after them."""


def gang_error(
    what: str | Callable[[tuple[int, ...]], str],
    global_ranks: list[int],
    rank: int,
    timeout: timedelta,
    cause: BaseException,
    reason: tuple[str, tuple[int, ...]] | None = None,
    call: Call | None = None,
    known: bool = True,
) -> GangError:
    """The error of ``what`` (``"op failed on gang ..."``; or, given the ranks the error names,
    those words), which ``cause`` ended for the process of gang rank ``rank`` of a gang of
    ``global_ranks``: it names the culprits where the failure reports tell (read here, after
    the failure), or else ``reason`` (a finding of the caller's, and the global ranks it
    names), or else the members that did not take part. ``call``: the collective that failed,
    which the members in other collectives are named against. ``known``: whether
    ``global_ranks`` are the collective's group (else the job's, the group not being known).
    Where it names a rank, the process's torchelastic error file says so, dated after the
    culprits' own files; under torchrun, the culprits on this host end first (see
    :func:`~gangmesh.runtime.faults.error_files.let_culprits_end`)."""
    failed_at = time.time()
    found = failure_reports.explain(global_ranks, rank, timeout, failed_at, call, known)
    detail = torch_errors.summary(cause, timeout.total_seconds()) if reason is None else reason[0]
    named = found is not None and (found.culprits or found.mismatched or found.absent_global)
    if found is not None and named and (found.culprits or reason is None):
        detail = f"{found} ({detail})"  # a caller's own finding stays as it is
    culprits: tuple[int, ...] = ()
    if found is not None and found.culprits:
        culprits = tuple(c.rank for c in found.culprits)
    elif found is not None and found.mismatched and reason is None:
        culprits = found.root or tuple(rank for rank, _ in found.mismatched)
    elif reason is not None:
        culprits = reason[1]
    elif found is not None:
        culprits = found.absent_global
    said = what if isinstance(what, str) else what(culprits)
    error = GangError(f"{said}: {detail}")
    error.culprits = culprits
    own = found is not None and found.me is not None and found.root == (found.me,)
    record(error, failed_at, own)
    if error_files.own_path():  # torchrun counts the culprits first only if they end first
        error_files.let_culprits_end(_CULPRITS_END)
    return error


_KINDS: dict[type[BaseException], type[GangError]] = {}
"""The GangError made for each of torch's error types (see :func:`as_kind_of`)."""


def as_kind_of(error: GangError, cause: BaseException) -> GangError:
    """``error``, as an instance of ``cause``'s type too (a GangError that is also a
    ``DistBackendError``, say), so that a program's ``except`` clause for torch's error still
    catches what a collective of torch's raises once gangmesh names its culprits."""
    kind = type(cause)
    if isinstance(error, kind) or not issubclass(kind, RuntimeError):
        return error
    mixed = _KINDS.get(kind)
    if mixed is None:
        namespace = {
            "__module__": GangError.__module__,
            "__qualname__": GangError.__qualname__,
            "__reduce__": lambda self: (_remade, (kind, self.args, self.culprits)),
        }
        mixed = _KINDS[kind] = type(GangError.__name__, (GangError, kind), namespace)
    both = mixed(*error.args)
    both.culprits = error.culprits
    return both


def _remade(
    kind: type[BaseException], args: tuple[object, ...], culprits: tuple[int, ...]
) -> GangError:
    """A GangError of :func:`as_kind_of`, unpickled (its class is made at run time)."""
    error = GangError(*args)
    error.culprits = culprits
    return as_kind_of(error, kind.__new__(kind))


def record(error: GangError, failed_at: float, own: bool = False) -> None:
    """Where ``error`` (which ended a wait at ``failed_at``) names culprits, say so in this
    process's torchelastic error file, dated after the culprits' own files (before the
    others', where it names this process itself: ``own``), whether or not this process lets
    the error go uncaught; not where a survivor named this process as a culprit first."""
    if error.culprits and error_files.own_path() and not error_files.named_by_a_survivor():
        text = f"GangError: {error}"
        error_files.write(error_files.own_path(), text, text, failed_at + (-1 if own else 1))
