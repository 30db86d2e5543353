"""fairseq2 0.8.1's current and default gangs in gangmesh.compat.fairseq2: per device, on the
one stack of gangmesh's ``with gangs:``, with gangs of one process where none are set; and its
operational errors."""

from __future__ import annotations

import threading

import pytest
import torch

import gangmesh as gm
from gangmesh.compat import fairseq2 as compat
from gangmesh.compat.fairseq2 import context

CPU, META, CUDA = torch.device("cpu"), torch.device("meta"), torch.device("cuda", 0)


@pytest.fixture(autouse=True)
def no_default_gangs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Default gangs are the process's: each test starts, and leaves, without any."""
    monkeypatch.setattr(context, "_defaults", {})


def test_one_stack_what_each_library_s_question_returns_where():
    a, b, c = (gm.create_fake_gangs(CPU) for _ in range(3))
    alone = compat.get_default_gangs(META)  # held: the same object for as long as it is
    compat.set_default_gangs(c)
    seen = []

    def look(where: str) -> None:
        seen.append((where, gm.maybe_get_current_gangs(), compat.get_current_gangs(),
                     compat.get_current_gangs(META), compat.get_default_gangs()))  # fmt: skip

    look("outside")
    with a:
        look("with a")
        with compat.set_gangs(b, meta=True):
            look("set_gangs(b, meta=True)")
            with a:
                look("with a, inside")
            in_thread = threading.Thread(target=look, args=("another thread",))
            in_thread.start()
            in_thread.join()
            look("set_gangs(b), again")
        look("with a, again")
    look("outside, again")
    # where: (gangmesh's maybe_get_current_gangs, fairseq2's get_current_gangs() on the
    # default device cpu and on meta, get_default_gangs())
    assert seen == [
        ("outside", None, c, alone, c),
        ("with a", a, a, alone, c),
        ("set_gangs(b, meta=True)", b, b, b, c),
        ("with a, inside", a, a, b, c),
        ("another thread", None, c, alone, c),
        ("set_gangs(b), again", b, b, b, c),
        ("with a, again", a, a, alone, c),
        ("outside, again", None, c, alone, c),
    ]


def test_outside_any_block_fairseq2_s_question_gets_gangs_of_one_process():
    alone = compat.get_current_gangs()
    assert gm.maybe_get_current_gangs() is None
    assert alone is compat.get_default_gangs(CPU) is compat.get_current_gangs(META)
    assert alone.device == CPU and isinstance(alone.root, compat.FakeGang)
    assert [gang.size for gang in alone.values()] == [1] * len(alone)
    on_cuda = compat.get_current_gangs(CUDA)  # a device is only named: nothing runs there
    assert on_cuda.device == CUDA and on_cuda is not alone


def test_gangs_are_current_for_their_own_device_entered_with_it_as_fairseq2_s_test_does():
    # fairseq2 0.8.1's tests/unit/test_gang.py, on a device that is not the default one
    gangs, inner, defaults = (gm.create_fake_gangs(CUDA) for _ in range(3))
    compat.set_default_gangs(defaults)
    with CUDA, gangs:
        assert compat.get_current_gangs() is gangs
        assert compat.get_current_gangs(CPU) is not gangs  # cpu's: none entered, no default
        with compat.set_gangs(inner):
            assert compat.get_current_gangs() is inner
            assert compat.get_default_gangs() is defaults
        assert compat.get_current_gangs() is gangs
    assert compat.get_current_gangs(CUDA) is compat.get_default_gangs(CUDA) is defaults
    assert compat.get_current_gangs() is not defaults  # the default device is cpu again


def test_set_default_gangs_with_meta_serves_the_meta_device_too():
    gangs = gm.create_fake_gangs(CPU)
    compat.set_default_gangs(gangs, meta=True)
    assert compat.get_default_gangs(META) is compat.get_current_gangs(META) is gangs


def test_a_block_left_by_an_error_leaves_the_stack_as_it_was():
    gangs = gm.create_fake_gangs(CPU)
    with pytest.raises(KeyError), compat.set_gangs(gangs, meta=True):
        raise KeyError("inside")
    assert gm.maybe_get_current_gangs() is None
    assert compat.get_current_gangs(META) is not gangs


def test_the_standard_context_is_the_functions_as_an_object():
    gangs = gm.create_fake_gangs(CPU)
    contexts = compat.StandardGangContext(), compat.StandardGangContext()
    assert isinstance(contexts[0], compat.GangContext)
    with contexts[0].set_gangs(gangs):
        assert contexts[1].get_current_gangs() is gangs is compat.get_current_gangs(CPU)
    with pytest.raises(TypeError, match="abstract"):
        compat.GangContext()  # type: ignore[abstract]
    # fairseq2's composition root registers it under its 0.8.1 names
    assert compat._StandardGangContext is compat._GangManager is compat.StandardGangContext


def test_bad_arguments_name_themselves():
    gangs = gm.create_fake_gangs(CPU)
    with pytest.raises(TypeError, match=r"^device: expected a torch\.device or None, got 'cpu'$"):
        compat.get_current_gangs("cpu")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^device: expected a torch\.device"):
        compat.get_default_gangs(0)  # type: ignore[arg-type]
    for call in (compat.set_gangs, compat.set_default_gangs):
        with pytest.raises(
            TypeError, match=r"^gangs: expected a Gangs \(gangs on a torch\.device\), got \[\]$"
        ):
            call([])  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^meta: expected True or False, got 'yes'$"):
            call(gangs, meta="yes")  # type: ignore[arg-type]
    assert gm.maybe_get_current_gangs() is None


def test_an_operational_gang_error_carries_the_collective_s_error():
    cause = gm.GangError("all_reduce(SUM) failed on gang 'tp': global rank 3 raised\nmore")
    with pytest.raises(compat.OperationalError) as raised:
        compat.raise_operational_gang_error(cause)
    assert str(raised.value) == (
        "A collective communication error occurred: all_reduce(SUM) failed on gang 'tp': "
        "global rank 3 raised"
    )
    assert raised.value.__cause__ is cause
    with pytest.raises(TypeError, match=r"^cause: expected the collective's exception, got 'x'$"):
        compat.raise_operational_gang_error("x")  # type: ignore[arg-type]


def test_where_fairseq2_is_loaded_the_operational_error_is_fairseq2_s_too():
    error = pytest.importorskip("fairseq2.error", reason="fairseq2 is not installed")
    with pytest.raises(error.OperationalError) as raised:
        compat.raise_operational_gang_error(gm.GangError("broken"))
    assert isinstance(raised.value, compat.OperationalError)
