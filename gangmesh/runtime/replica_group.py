"""torchft, imported on demand, and its process group across replica groups, which first checks
that the groups meeting in it are distinct and laid out alike."""

from __future__ import annotations

import functools
import importlib
import json
import logging
import os
import re
import sys
from dataclasses import dataclass
from datetime import timedelta
from types import ModuleType
from typing import Any

import torch

INSTALL_HINT = "pip install 'gangmesh[ft]'"
_GRPC_STATUS = re.compile(r'status: (?P<code>\w+), message: "(?P<message>(?:[^"\\]|\\.)*)"')
"""A gRPC status as torchft's errors write it, its metadata after it."""


_TORCHFT_LOGGERS = ("torchft", "torchft_quorums", "torchft_commits", "torchft_errors")
"""torchft's Python loggers: a few INFO lines per step and replica group."""


def torchft() -> ModuleType:
    """The torchft package, its per-step INFO logging quiet unless gangmesh's logger is at
    INFO or below: its Rust side's (``RUST_LOG`` "warn" unless set, read once, as torchft is
    first imported) and its Python loggers' (WARNING, unless the program set their levels).

    :raises ImportError: torchft is not installed, saying how to install it.
    """
    if not logging.getLogger("gangmesh").isEnabledFor(logging.INFO):
        if "torchft" not in sys.modules:
            os.environ.setdefault("RUST_LOG", "warn")
        for name in _TORCHFT_LOGGERS:
            logger = logging.getLogger(name)
            if logger.level == logging.NOTSET:
                logger.setLevel(logging.WARNING)
    try:
        return importlib.import_module("torchft")
    except ImportError as ex:
        raise ImportError(
            f"replica groups need torchft, which is not installed: {INSTALL_HINT}"
        ) from ex


def torchft_reason(error: BaseException) -> str:
    """torchft's error as one line: a gRPC status as its message and code, without the
    metadata; other errors up to torchft's advice (after the first ";").

    >>> torchft_reason(TimeoutError(
    ...     'status: Cancelled, message: "Timeout expired", details: [], metadata: MetadataMap '
    ...     '{ headers: {} }'))
    'Timeout expired (gRPC status Cancelled)'
    """
    text = str(error) or type(error).__name__
    status = _GRPC_STATUS.search(text)
    if status is not None:
        message = status["message"].replace('\\"', '"')
        return f"{message} (gRPC status {status['code']})"
    return " ".join(text.split(";", 1)[0].split())


@dataclass
class Identity:
    """What a replica group says of itself when it meets the others of a quorum."""

    group: int
    """Its number among the replica groups."""
    layout: str = ""
    """Its in-group layout, once its gangs are built."""
    refusal: ValueError | None = None
    """Why it cannot train with the groups it met, once found."""

    def meet(self, store: Any, rank: int, world_size: int) -> None:
        """Say who we are in the quorum's ``store`` and read the others (``world_size`` of
        them, ``rank`` ours).

        :raises ValueError: two groups with one number, or two layouts (kept in ``refusal``).
        """
        store.set(f"gangmesh/replica/{rank}", json.dumps([self.group, self.layout]))
        met = [json.loads(store.get(f"gangmesh/replica/{r}")) for r in range(world_size)]
        groups = [group for group, _ in met]
        twice = sorted({group for group in groups if groups.count(group) > 1})
        if twice:
            self.refusal = ValueError(
                f"group: replica group {twice[0]} joined twice; expected each launch to have a "
                "number of its own"
            )
        differing = [(group, layout) for group, layout in met if layout != self.layout]
        if differing and self.refusal is None:
            other, layout = differing[0]
            self.refusal = ValueError(
                f"replica groups {self.group} and {other} are laid out differently: "
                f"{self.layout or 'no gangs'} and {layout or 'no gangs'}; expected every "
                "replica group to create its gangs with the same sizes"
            )
        if self.refusal is not None:
            raise self.refusal


def checked_group(device: torch.device, timeout: timedelta, identity: Identity) -> Any:
    """torchft's reconfigurable process group for ``device`` (gloo on CPU, NCCL on CUDA) that
    meets the other groups through ``identity`` each time a quorum configures it."""
    base = "ProcessGroupNCCL" if device.type == "cuda" else "ProcessGroupGloo"
    return _checked(base)(identity, timeout)


@functools.cache
def _checked(base_name: str) -> type:
    ft = torchft()
    process_group = importlib.import_module("torchft.process_group")
    base: type = getattr(ft, base_name)

    class Checked(base):  # type: ignore[misc]
        def __init__(self, identity: Identity, timeout: timedelta) -> None:
            super().__init__(timeout=timeout)
            self._identity = identity
            self._meeting_timeout = timeout

        def configure(self, store_addr: str, replica_id: str, rank: int, world_size: int,
                      *more: Any, **named: Any) -> None:  # fmt: skip
            store = process_group.create_store_client(store_addr, timeout=self._meeting_timeout)
            self._identity.meet(store, rank, world_size)
            super().configure(store_addr, replica_id, rank, world_size, *more, **named)

    Checked.__name__ = Checked.__qualname__ = f"Checked{base_name}"
    return Checked
