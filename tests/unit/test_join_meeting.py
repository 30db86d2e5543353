"""How a job's rank 0 meets the other job at the join (the other job that came and left
before it met this one is named so, and met where it comes back), and how it tells its other
ranks."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
import torch.distributed as dist

from gangmesh.assembly.join_meeting import first_epoch, meeting_key, outcome, publish
from gangmesh.assembly.join_sides import Epoch, Member, Side, arrive
from gangmesh.assembly.store_calls import BoundedStore, release
from gangmesh.plan.topology import MeshTopology
from gangmesh.runtime.gang import GangError

ADDRESS = "127.0.0.1:29600"


@pytest.fixture
def kept() -> Iterator[dist.HashStore]:
    """A store of this process."""
    kept = dist.HashStore()
    yield kept
    release(kept)


@pytest.fixture
def store(kept: dist.HashStore) -> BoundedStore:
    """Its calls, bounded as the join's are (one at a time)."""
    return BoundedStore(kept, 2.0)


def side(job: str) -> Side:
    return Side(job, 0, MeshTopology(1), {}, (Member.this_process(0),))


def meeting_after_the_generator_left(kept: dist.HashStore, store: BoundedStore, wait: float):
    """The trainer's rank 0 meeting the generator, which arrived, was seen, and closed its
    join (as close() does) before it said it is in their epoch; and the generator it saw."""
    generator = arrive(store, side("generator"))
    trainer = arrive(store, side("trainer"))
    pool = ThreadPoolExecutor(1)
    meeting = pool.submit(
        first_epoch, store, trainer, "generator", timedelta(seconds=wait), ADDRESS
    )
    pool.shutdown(wait=False)
    kept.wait([f"ready/{Epoch(1, 1).key}/trainer"], timedelta(seconds=30))  # it saw the generator
    kept.delete_key("latest/generator")
    return meeting, generator


def test_a_job_that_came_and_left_before_it_met_this_one_is_named_so(kept, store):
    meeting, generator = meeting_after_the_generator_left(kept, store, 1.0)
    with pytest.raises(GangError) as caught:
        meeting.result(timeout=30)
    leader = generator.members[0]
    assert str(caught.value) == (
        f"job generator came to the join at {ADDRESS} (its rank 0 on host {leader.host}, pid "
        f"{leader.pid}) and left it since: it did not meet this job within 1 s (its next push "
        "or receive meets it)"
    )
    assert caught.value.job == "generator" and caught.value.culprits == (0,)


def test_a_job_that_left_and_came_back_is_met_in_its_new_arrival(kept, store):
    meeting, _ = meeting_after_the_generator_left(kept, store, 60.0)
    again = arrive(store, side("generator"))  # restarted by its launcher
    store.set(f"ready/{Epoch(2, 1).key}/generator", "1")
    assert meeting.result(timeout=30) == (Epoch(2, 1), again)


def test_a_job_that_is_in_the_epoch_is_met_with_its_arrival(store):
    generator = arrive(store, side("generator"))
    trainer = arrive(store, side("trainer"))
    store.set(f"ready/{Epoch(1, 1).key}/generator", "1")
    epoch, found = first_epoch(store, trainer, "generator", timedelta(seconds=30), ADDRESS)
    assert epoch == Epoch(1, 1) and found == generator


def test_every_other_rank_reads_the_meeting_and_the_last_takes_it_out(kept, store):
    trainer, generator = side("trainer"), side("generator")
    publish(store, trainer, 3, (Epoch(1, 1), generator))
    key = meeting_key("trainer", 0)
    for reader in (1, 2):
        assert outcome(store, "trainer", 0, 3, timedelta(seconds=5)) == (Epoch(1, 1), generator)
        assert kept.check([key]) == (reader == 1), reader
    assert not kept.check([f"{key}/read"])


def test_a_job_of_one_rank_tells_nobody(kept, store):
    publish(store, side("trainer"), 1, (Epoch(1, 1), side("generator")))
    assert kept.num_keys() == 0
