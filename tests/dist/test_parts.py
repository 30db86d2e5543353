"""Parts of a job on 8 real gloo processes: each process its part, each part its own gangs,
groups and meshes inside it, bridges between parts, and each closing only what it made."""

from __future__ import annotations

import pytest

from tests.dist.launch import every_rank_results

pytestmark = pytest.mark.dist

WORLD = 8
TRAINER, ROLLOUT = list(range(4)), list(range(4, 8))


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return every_rank_results("parts.py", WORLD, tmp_path_factory.mktemp("parts"))


def test_each_process_is_given_its_part(results):
    for me in range(WORLD):
        got = results[me]
        assert got["part"] == ("trainer" if me < 4 else "rollout")
        assert got["part_rank"] == [me % 4, 4]
        assert got["ranks"] == {"trainer": TRAINER, "rollout": ROLLOUT}


def test_each_parts_gangs_stay_inside_it_and_sum_right(results):
    for me in range(WORLD):
        got, base = results[me], me - me % 4
        tp = [base + (me % 4) // 2 * 2, base + (me % 4) // 2 * 2 + 1]
        sdp = [base + me % 2, base + me % 2 + 2]
        assert got["groups"] == {"tp": tp, "sdp": sdp, "dp": sdp}
        assert got["sums"] == {"tp": sum(tp), "sdp": sum(sdp)}
        assert got["communicators"] == [*sorted([tp, sdp]), list(range(base, base + 4))]
        assert got["mesh_ranks"] == list(range(base, base + 4))


def test_closing_the_rollout_parts_gangs_leaves_the_trainers_working(results):
    for me in TRAINER:
        tp = [me // 2 * 2, me // 2 * 2 + 1]
        assert results[me]["trainer_after_rollout_closed"] == sum(tp)
    grads = {results[me]["fsdp_tp_grad"] for me in TRAINER}
    assert len(grads) == 1, "every trainer process holds the same full gradient"
    assert all(results[me]["root_after_parts_closed"] == WORLD for me in range(WORLD))


def test_a_bridge_broadcasts_from_rank_0_to_the_rollout_part(results):
    for me in range(WORLD):
        joined = me == 0 or me in ROLLOUT
        assert results[me]["bridge"] == ([0, *ROLLOUT] if joined else None)
        assert results[me]["bridged"] == (42.0 if joined else 0.0)
        assert results[me]["bridged_after_close"] == (7.0 if joined else 0.0)


def test_bad_parts_and_bridges_are_refused_on_every_process_naming_the_argument(results):
    for me in range(WORLD):
        got = results[me]
        assert "sizes" in got["bad_sizes"] and "8" in got["bad_sizes"], got["bad_sizes"]
        assert "tp" in got["bad_name"], got["bad_name"]
        assert "rollout" in got["bad_bridge"] and "3" in got["bad_bridge"], got["bad_bridge"]
        assert (
            "root_gang: expected the gang of the default process group"
            in (got["part_root_as_job_root"])
        )


def test_a_process_asking_for_other_parts_is_named_by_every_process_within_15_s(results):
    for me in range(WORLD):
        text = results[me]["disagreement"]
        seconds, _, message = text.partition(" s: ")
        assert "create_parts" in message and "ranks [7] asked for" in message, text
        assert float(seconds) < 15, text
