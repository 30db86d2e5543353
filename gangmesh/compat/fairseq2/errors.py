"""fairseq2's operational errors: an operation failed for a reason outside the program."""

from __future__ import annotations

import sys
from typing import NoReturn, cast

from gangmesh.plan._checks import InvalidTypeError


class OperationalError(Exception):
    """An operation failed for a reason outside the program (a peer, the network, the disk),
    not because of its code or arguments: fairseq2's runners log it and exit with 1."""


def raise_operational_gang_error(cause: BaseException) -> NoReturn:
    """Raise an :class:`OperationalError` whose cause is ``cause``, a collective that failed
    (a :exc:`~gangmesh.GangError`, which names who broke the job).

    Where fairseq2 is loaded the error is also fairseq2's ``OperationalError``, so that
    fairseq2's own runners take it as theirs.

    :param cause: the collective's error.
    :raises OperationalError: always.
    :raises TypeError: ``cause`` is not an exception.
    """
    if not isinstance(cause, BaseException):
        raise InvalidTypeError(f"cause: expected the collective's exception, got {cause!r}")
    first_line = (str(cause).splitlines() or [type(cause).__name__])[0]
    kind = _operational_error()
    raise kind(f"A collective communication error occurred: {first_line}") from cause


def _operational_error() -> type[OperationalError]:
    """OperationalError, or where fairseq2 is loaded, its subclass that is fairseq2's too."""
    theirs = getattr(sys.modules.get("fairseq2.error"), "OperationalError", None)
    if not isinstance(theirs, type) or not issubclass(theirs, Exception):
        return OperationalError
    kind = _also_theirs.get(theirs)
    if kind is None:
        made = type("OperationalError", (OperationalError, theirs), {"__module__": __name__})
        kind = _also_theirs[theirs] = cast("type[OperationalError]", made)
    return kind


_also_theirs: dict[type, type[OperationalError]] = {}
"""fairseq2's OperationalError -> the subclass of ours that is also theirs."""
