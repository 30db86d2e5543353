"""Agreements: every process of a gang asks for the same thing, or each hears who asked for
what. One meeting in the job's store (:func:`gangmesh.assembly.rendezvous.meet`) per call."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from gangmesh.assembly.rendezvous import default_group_store, meet, next_topic
from gangmesh.plan.layout import Layout
from gangmesh.runtime.gang import DEFAULT_TIMEOUT, Gang


def disagreement(requests: dict[int, dict[str, Any]]) -> str:
    """Which ranks asked for what, most common request first."""
    by_request: dict[str, list[int]] = {}
    for rank, request in requests.items():
        text = ", ".join(f"{key}={value}" for key, value in request.items() if value is not None)
        by_request.setdefault(text, []).append(rank)
    parts = [
        f"ranks {_ranks_text(ranks)} asked for {text}"
        for text, ranks in sorted(by_request.items(), key=lambda item: -len(item[1]))
    ]
    return "the processes asked for different things: " + "; ".join(parts)


def _ranks_text(ranks: list[int]) -> str:
    return str(ranks) if len(ranks) <= 8 else f"{ranks[:7]} ... ({len(ranks)} ranks)"


class Agreement:
    """Checks that every process of a gang asked ``what`` for the same ``request``.

    One exchange through the job's store: each process leaves its request and waits
    until all did. Processes that asked for something else are named (by global rank)
    within seconds; processes that never come are named when the timeout expires. The
    gangs of disjoint processes meet apart.

    :param root: the gang whose processes must agree.
    :param what: the call agreed on, as messages name it.
    :param request: what this process asks for (JSON-able values, or timedeltas).
    """

    def __init__(self, root: Gang, what: str, request: Mapping[str, Any]) -> None:
        self._what = what
        self._root = root if _meets(root) else None
        self._request = {k: _jsonable(v) for k, v in request.items()}
        self._members: list[int] = []
        self._topic = ""
        if self._root is not None:  # a root's group numbers its members as the gang does
            self._members = dist.get_process_group_ranks(self._root.as_process_group())
            whole = len(self._members) == dist.get_world_size()
            self._topic = next_topic(what if whole else f"{what}@{_ranks_key(self._members)}")

    def leave_request(self) -> None:
        """Leave this request without waiting (this process is about to raise)."""
        if self._root is not None:
            meet(default_group_store(), self._topic, self._root.rank, self._root.size,
                 self._request, DEFAULT_TIMEOUT, wait=False, members=self._members)  # fmt: skip

    def wait(self, timeout: timedelta) -> None:
        """Wait for every process; ValueError naming who asked for what if they differ."""
        if self._root is None:
            return
        root = self._root
        requests = meet(
            default_group_store(), self._topic, root.rank, root.size, self._request, timeout,
            members=self._members,
        )  # fmt: skip
        if requests is not None:
            by_rank = {self._members[r]: request for r, request in requests.items()}
            raise ValueError(f"{self._what}: {disagreement(by_rank)}")


class LayoutAgreement(Agreement):
    """Checks that every process of the root gang asked ``create_gangs`` for the same layout.

    :param root: the gang of every process (of the job, or of one part of it).
    :param layout: the layout asked for; given as keywords, it is compared as its
        :class:`Layout` when it is one (so equal layouts spelled differently agree),
        else as given.
    :param others: the other keywords to agree on (the timeout, the placement).
    """

    def __init__(self, root: Gang, layout: Layout | Mapping[str, Any], **others: Any) -> None:
        super().__init__(root, "create_gangs", {**_normalized(layout), **others})


def _ranks_key(ranks: list[int]) -> str:
    """A short name for a set of global ranks, the same on every process."""
    text = ",".join(map(str, ranks)).encode()
    return hashlib.sha1(text, usedforsecurity=False).hexdigest()[:12]


def _meets(root: Gang) -> bool:
    """Whether the root's processes are real and several (simulated ranks have no peers)."""
    return (
        root.supports_process_group
        and root.size > 1
        and dist.get_backend(root.as_process_group()) != "fake"
    )


def _normalized(request: Layout | Mapping[str, Any]) -> dict[str, Any]:
    """The layout's keywords (then the other keywords), or the request as given where its
    layout is not one (the process asking for it is about to raise)."""
    if isinstance(request, Layout):
        return request.keywords()
    layout = {k: v for k, v in request.items() if k in _LAYOUT_KEYWORDS}
    try:
        keywords = Layout(**layout).keywords()
    except (TypeError, ValueError):
        return dict(request)
    return {**keywords, **{k: v for k, v in request.items() if k not in _LAYOUT_KEYWORDS}}


_LAYOUT_KEYWORDS = frozenset(Layout.__dataclass_fields__)
"""The keywords of a layout: its sizes and order."""


def _jsonable(value: Any) -> Any:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return value if isinstance(value, (int, float, str, type(None))) else repr(value)
