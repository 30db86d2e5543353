"""Test-wide settings."""

import os

import pytest
from hypothesis import settings

# Every world the suite starts means gloo on CPU, also where CUDA is available: processes
# that leave the device to gangmesh's default take cpu (GANGMESH_DEVICE), here and in every
# process the tests start. The tests of NCCL (tests/gpu) name their devices.
os.environ["GANGMESH_DEVICE"] = "cpu"

# pytester runs pytest sessions in a temporary directory (tests of the gangmesh pytest plugin).
pytest_plugins = ["pytester"]

# Timing is measured in benchmarks/, not here: a loaded 2-core CI machine must not turn a
# slow example into a failure.
settings.register_profile("gangmesh", deadline=None)
settings.load_profile("gangmesh")


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytester, its sessions without pytest-benchmark (where installed), as the suite's
    own: it warns on every parallel run."""
    given = os.environ.get("PYTEST_ADDOPTS", "")
    monkeypatch.setenv("PYTEST_ADDOPTS", f"{given} -p no:benchmark".strip())
    return pytester
