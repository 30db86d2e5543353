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
