"""The worked example of docs/testing.rst: the property holds for local_samples, hypothesis
refutes the broken variant with the counterexample the page shows (the plugin examples run
in tests/dist/test_plugin_world.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.shown import assert_output_shown

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "docs" / "examples"
PAGE = REPO / "docs" / "testing.rst"


def load_example():
    spec = importlib.util.spec_from_file_location("batch_slicing", EXAMPLES / "batch_slicing.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_property_holds_for_local_samples():
    load_example().test_every_sample_lands_on_exactly_one_dp_rank()


def test_hypothesis_refutes_the_broken_variant_as_the_page_says():
    example = load_example()
    with pytest.raises(AssertionError) as caught:
        example.broken_every_sample_lands_on_exactly_one_dp_rank()
    assert str(caught.value) == "read twice: [0], never read: []"
    report = "\n".join(getattr(caught.value, "__notes__", []))
    shrunk = "MeshTopology(2, pp=1, dp_replicate=2, dp_shard=1, cp=1, tp=1, ep=1, etp=1)"
    assert shrunk in report and "global_batch_size=1," in report, report
    # the page shows it as hypothesis prints it (older versions: "Falsifying example:")
    report = report.replace("Falsifying example:", "Failing test case:")
    said = f"AssertionError: {caught.value}\n{report}"
    assert_output_shown("testing.rst", "AssertionError: read twice", said)


def test_the_broken_variant_is_right_without_replication():
    """The bug needs dp_replicate > 1: the layouts fixed FSDP tests use never show it."""
    example = load_example()
    for sizes in ({"dp_shard": 8}, {"dp_shard": 4, "tp": 2}, {"pp": 2, "dp_shard": 2, "cp": 2}):
        plan = example.gm.MeshTopology(8, **sizes)
        for rank in range(8):
            example.check_each_sample_read_once(example.local_samples_broken, plan, rank, 13)
