"""What an ending process lets go of first: every callback once, the latest first."""

from __future__ import annotations

import logging

import pytest

from gangmesh.runtime import faults


def test_leaving_calls_each_callback_once_the_latest_first_and_skips_those_forgotten():
    called: list[str] = []

    def first() -> None:
        called.append("first")

    def forgotten() -> None:
        called.append("forgotten")

    def last() -> None:
        called.append("last")

    for callback in (first, forgotten, last):
        faults.on_leaving(callback)
    faults.forget_leaving(forgotten)
    faults.leave()
    faults.leave()
    assert called == ["last", "first"]


def test_a_callback_that_fails_is_logged_and_the_others_still_run(caplog):
    called: list[str] = []

    def broken() -> None:
        raise RuntimeError("the manager is gone")

    faults.on_leaving(lambda: called.append("before"))
    faults.on_leaving(broken)
    with caplog.at_level(logging.DEBUG, logger="gangmesh"):
        faults.leave()
    assert called == ["before"]
    assert "the manager is gone" in caplog.text


def test_forgetting_a_callback_never_given_does_nothing():
    faults.forget_leaving(print)
    faults.leave()


@pytest.fixture(autouse=True)
def _nothing_left():
    faults.leave()
    yield
    faults.leave()
