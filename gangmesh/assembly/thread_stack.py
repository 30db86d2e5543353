"""A stack per thread of the objects it entered, each for some devices: where the calling
thread's current gangs are kept."""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

import torch

T = TypeVar("T")


class DeviceStack(Generic[T]):
    """Per thread, the objects entered and not yet left, innermost last, each for the
    devices it was entered for."""

    def __init__(self) -> None:
        self._local = threading.local()

    def _entries(self) -> list[tuple[T, tuple[torch.device, ...]]]:
        entries: list[tuple[T, tuple[torch.device, ...]]] | None = getattr(
            self._local, "entries", None
        )
        if entries is None:
            entries = self._local.entries = []
        return entries

    def enter(self, item: T, devices: tuple[torch.device, ...]) -> None:
        """Put ``item`` on the calling thread's stack for ``devices``."""
        self._entries().append((item, devices))

    def leave(self, item: T) -> None:
        """Take the innermost entry of ``item`` off the calling thread's stack, if it is there."""
        entries = self._entries()
        for at in range(len(entries) - 1, -1, -1):
            if entries[at][0] is item:
                del entries[at]
                return

    def innermost(self) -> T | None:
        """The innermost object of the calling thread's stack, or None."""
        entries = self._entries()
        return entries[-1][0] if entries else None

    def innermost_for(self, device: torch.device) -> T | None:
        """The innermost object of the calling thread's stack entered for ``device``, or None."""
        for item, devices in reversed(self._entries()):
            if device in devices:
                return item
        return None
