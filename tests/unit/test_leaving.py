"""What an ending process lets go of first: every method once, the latest first, none of an
object already collected."""

from __future__ import annotations

import gc
import logging

import pytest

from gangmesh.runtime import faults


class Holder:
    """Something that lets go of what it holds; ``called`` says in what order."""

    def __init__(self, name: str, called: list[str]) -> None:
        self.name, self.called = name, called

    def let_go(self) -> None:
        self.called.append(self.name)

    def fail(self) -> None:
        raise RuntimeError(f"{self.name} is gone")


def test_leaving_calls_each_method_once_the_latest_first_and_skips_those_forgotten():
    called: list[str] = []
    first, forgotten, last = (Holder(name, called) for name in ("first", "forgotten", "last"))
    for holder in (first, forgotten, last):
        faults.on_leaving(holder.let_go)
    faults.forget_leaving(forgotten.let_go)
    faults.leave()
    faults.leave()
    assert called == ["last", "first"]


def test_an_object_collected_before_the_end_is_not_kept_alive_nor_called():
    called: list[str] = []
    faults.on_leaving(Holder("dropped", called).let_go)
    gc.collect()
    faults.leave()
    assert called == []


def test_a_method_that_fails_is_logged_and_the_others_still_run(caplog):
    called: list[str] = []
    before, broken = Holder("before", called), Holder("the manager", called)
    faults.on_leaving(before.let_go)
    faults.on_leaving(broken.fail)
    with caplog.at_level(logging.DEBUG, logger="gangmesh"):
        faults.leave()
    assert called == ["before"]
    assert "the manager is gone" in caplog.text


@pytest.fixture(autouse=True)
def _nothing_left():
    faults.leave()
    yield
    faults.leave()
