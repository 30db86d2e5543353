"""What an ending process lets go of first: every owner once, the latest first, none that was
collected before."""

from __future__ import annotations

import gc
import logging
import threading

import pytest

from gangmesh.runtime import faults
from gangmesh.runtime.faults import leaving


class Owner:
    """Something held that is let go of; ``called`` says in what order."""

    def __init__(self, name: str, called: list[str]) -> None:
        self.name, self.called = name, called


def let_go(owner: Owner) -> None:
    owner.called.append(owner.name)


def test_leaving_lets_go_of_each_owner_once_the_latest_first_and_not_of_those_forgotten():
    called: list[str] = []
    first, forgotten, last = (Owner(name, called) for name in ("first", "forgotten", "last"))
    for owner in (first, forgotten, last):
        faults.on_leaving(owner, let_go)
    faults.forget_leaving(forgotten)
    faults.leave()
    faults.leave()
    assert called == ["last", "first"]


def test_an_owner_collected_before_the_end_is_not_kept_alive_nor_let_go_of():
    called: list[str] = []
    faults.on_leaving(Owner("dropped", called), let_go)
    gc.collect()
    faults.leave()
    assert called == []


def test_a_failure_to_let_go_is_logged_and_the_others_are_still_let_go_of(caplog):
    called: list[str] = []
    before, broken = Owner("before", called), Owner("the manager", called)

    def fail(owner: Owner) -> None:
        raise RuntimeError(f"{owner.name} is gone")

    faults.on_leaving(before, let_go)
    faults.on_leaving(broken, fail)
    with caplog.at_level(logging.WARNING, logger="gangmesh"):
        faults.leave()
    assert called == ["before"]
    assert "the manager is gone" in caplog.text


def test_leaving_within_a_bound_returns_while_letting_go_still_waits():
    released, done = threading.Event(), threading.Event()
    waited: list[bool] = []

    def hold(owner: Owner) -> None:  # released only once leave_within has returned
        waited.append(released.wait(30))
        done.set()

    owner = Owner("held", [])
    faults.on_leaving(owner, hold)
    leaving.leave_within(0.05)
    released.set()
    assert done.wait(30) and waited == [True]


@pytest.fixture(autouse=True)
def _nothing_left():
    faults.leave()
    yield
    faults.leave()
