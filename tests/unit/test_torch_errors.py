"""torch's error text, summed up for a GangError's first line (texts as gloo and c10d print them)."""

from __future__ import annotations

import pytest

from gangmesh.runtime.faults.torch_errors import summary

TEXTS = {
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out "
    "waiting 4000ms for recv operation to complete": "timed out after 4 s",
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by "
    "peer [127.0.0.1]:21898. This is typically caused by a remote worker crashing. Check the logs "
    "of the remote worker before reporting an error. GLHF! 🏖️": "a peer's connection closed",
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
    "[127.0.0.1]:55220: Connection reset by peer. This is typically caused by a remote worker "
    "hanging or bugs in the application.": "a peer's connection closed",
    "Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or "
    "crash?": "a peer's connection closed",
    "Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.h:311] "
    "Connect timeout [none]": "timed out after 4 s",
    "[/x/gloo/pair.cc:12] Something else went wrong. This is typically caused by a remote worker "
    "crashing.\nframe #0: c10::Error": "Something else went wrong",
}


@pytest.mark.parametrize("text", sorted(TEXTS))
def test_torch_text_is_summed_up_without_its_source_path_or_advice(text):
    assert summary(RuntimeError(text), 4.0) == TEXTS[text]


def test_a_long_first_line_is_cut():
    said = summary(RuntimeError("x" * 500), 4.0)
    assert len(said) == 160 and said.endswith("...")


def test_a_store_error_in_the_program_s_own_call_is_no_collective_s():
    import datetime

    import torch.distributed as dist

    from gangmesh.runtime.faults.torch_calls import _of_a_collective, torch_call

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=datetime.timedelta(seconds=0.2))
    with pytest.raises(dist.DistStoreError) as raised:
        store.get("never-set")
    error = raised.value
    assert not _of_a_collective(error, torch_call(error.__traceback__))


@pytest.mark.parametrize(
    ("text", "backend"),
    [
        ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed "
         "out waiting 3000ms for recv operation to complete", True),
        ("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error [127.0.0.1]:4: "
         "Connection reset by peer", True),
        ("Application timeout caused pair closure", True),
        ("[../torch/csrc/distributed/c10d/ProcessGroupGloo.cpp:3070] Timed out", True),
        ("[../torch/csrc/distributed/c10d/TCPStore.cpp:106] Connection refused", False),
        ("Expected all tensors to be on the same device", False),
    ],
)  # fmt: skip
def test_gloo_and_c10d_texts_of_a_failed_collective_are_told_from_others(text, backend):
    from gangmesh.runtime.faults.torch_errors import backend_text

    assert backend_text(RuntimeError(text)) is backend


def test_a_named_error_of_torch_s_type_is_still_caught_as_that_type():
    import pickle

    import torch.distributed as dist

    import gangmesh as gm
    from gangmesh.runtime.faults.blame import as_kind_of

    error = gm.GangError("all_reduce failed on process group 'tp': global rank 3 ...")
    error.culprits = (3,)
    torch_s = dist.DistBackendError("NCCL communicator was aborted")
    both = as_kind_of(error, torch_s)
    with pytest.raises(dist.DistBackendError) as caught:  # a program's except for torch's type
        raise both from torch_s
    assert isinstance(caught.value, gm.GangError) and caught.value.culprits == (3,)
    assert type(caught.value).__name__ == "GangError" and str(caught.value) == str(error)
    again = pickle.loads(pickle.dumps(both))
    assert isinstance(again, dist.DistBackendError) and isinstance(again, gm.GangError)
    assert again.culprits == (3,) and str(again) == str(error)
    assert as_kind_of(error, RuntimeError("gloo")) is error  # a GangError is a RuntimeError
