"""fairseq2 0.8.1's current and default gangs, per device, kept on gangmesh's one stack.

A thread's current gangs for a device are the innermost it entered for that device, with
``with gangs:`` or :func:`set_gangs` (both on one stack, that of
:func:`~gangmesh.maybe_get_current_gangs`); else the process's default gangs for it
(:func:`set_default_gangs`); else gangs of one process.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from weakref import WeakValueDictionary

import torch
from typing_extensions import final, override

from gangmesh.assembly.factories import create_fake_gangs
from gangmesh.assembly.gangs import ENTERED, Gangs
from gangmesh.plan._checks import InvalidTypeError, check_flag

_META = torch.device("meta")
_CPU = torch.device("cpu")

_lock = threading.Lock()
_defaults: dict[torch.device, Gangs] = {}
"""The process's default gangs, by device."""
_alone: WeakValueDictionary[torch.device, Gangs] = WeakValueDictionary()
"""The gangs of one process handed out for a device without default gangs, while held."""


def get_current_gangs(device: torch.device | None = None) -> Gangs:
    """The calling thread's current gangs for ``device``: the innermost it entered for that
    device (``with gangs:``, :func:`set_gangs`), else :func:`get_default_gangs`.

    :param device: default: torch's default device (``torch.get_default_device()``).
    :raises TypeError: ``device`` is not a torch.device.
    """
    device = _device_or_default(device)
    entered = ENTERED.innermost_for(device)
    return _default_for(device) if entered is None else entered


def get_default_gangs(device: torch.device | None = None) -> Gangs:
    """The process's default gangs for ``device`` (:func:`set_default_gangs`); where none
    were set, gangs of one process (FakeGangs) on it, on cpu for the meta device: the same
    object for as long as anyone holds it.

    :param device: default: torch's default device (``torch.get_default_device()``).
    :raises TypeError: ``device`` is not a torch.device.
    """
    return _default_for(_device_or_default(device))


def set_default_gangs(gangs: Gangs, *, meta: bool = False) -> None:
    """Make ``gangs`` the process's default gangs for ``gangs.device``, in every thread.

    :param gangs: the gangs.
    :param meta: whether they are the default gangs of the meta device too.
    :raises TypeError: ``gangs`` has no device, or ``meta`` is not a bool.
    """
    devices = _devices_of(gangs, meta)
    with _lock:
        _defaults.update(dict.fromkeys(devices, gangs))


def set_gangs(gangs: Gangs, *, meta: bool = False) -> AbstractContextManager[None]:
    """Make ``gangs`` the calling thread's current gangs for ``gangs.device`` inside a
    ``with`` block: ``with set_gangs(gangs):``.

    :param gangs: the gangs.
    :param meta: whether they are the current gangs of the meta device too (a model built
        there, then moved, takes its sharding from them).
    :raises TypeError: ``gangs`` has no device, or ``meta`` is not a bool.
    """
    return _entered(gangs, _devices_of(gangs, meta))


class GangContext(ABC):
    """Gets and sets the calling thread's current gangs: :func:`get_current_gangs` and
    :func:`set_gangs` as an object that code is handed."""

    @abstractmethod
    def get_current_gangs(self, device: torch.device | None = None) -> Gangs:
        """The calling thread's current gangs for ``device``: see :func:`get_current_gangs`.

        :param device: default: torch's default device.
        """

    @abstractmethod
    def set_gangs(self, gangs: Gangs, *, meta: bool = False) -> AbstractContextManager[None]:
        """Make ``gangs`` current inside a ``with`` block: see :func:`set_gangs`.

        :param gangs: the gangs.
        :param meta: whether they are current for the meta device too.
        """


@final
class StandardGangContext(GangContext):
    """The GangContext of the functions of this module: every instance reads and sets the
    same gangs."""

    @override
    def get_current_gangs(self, device: torch.device | None = None) -> Gangs:
        return get_current_gangs(device)

    @override
    def set_gangs(self, gangs: Gangs, *, meta: bool = False) -> AbstractContextManager[None]:
        return set_gangs(gangs, meta=meta)


@contextmanager
def _entered(gangs: Gangs, devices: tuple[torch.device, ...]) -> Iterator[None]:
    """``gangs`` on the calling thread's stack for ``devices`` inside the block."""
    ENTERED.enter(gangs, devices)
    try:
        yield
    finally:
        ENTERED.leave(gangs)


def _default_for(device: torch.device) -> Gangs:
    """The default gangs of ``device``, else the gangs of one process held for it."""
    with _lock:
        gangs = _defaults.get(device)
        if gangs is None:
            alone_on = _CPU if device == _META else device
            gangs = _alone.get(alone_on)
            if gangs is None:
                gangs = _alone[alone_on] = create_fake_gangs(alone_on)
    return gangs


def _device_or_default(device: object) -> torch.device:
    """``device``, or torch's default device for None.

    :raises TypeError: ``device`` is neither.
    """
    if device is None:
        return torch.get_default_device()
    if not isinstance(device, torch.device):
        raise InvalidTypeError(f"device: expected a torch.device or None, got {device!r}")
    return device


def _devices_of(gangs: object, meta: object) -> tuple[torch.device, ...]:
    """The devices ``gangs`` are set for: their own, and the meta device with ``meta``.

    :raises TypeError: ``gangs`` has no device, or ``meta`` is not a bool.
    """
    device = getattr(gangs, "device", None)
    if not isinstance(device, torch.device):
        raise InvalidTypeError(f"gangs: expected a Gangs (gangs on a torch.device), got {gangs!r}")
    return (device, _META) if check_flag("meta", meta) else (device,)
