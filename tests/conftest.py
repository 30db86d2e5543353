"""Test-wide settings."""

import os
import shutil
import tempfile

import pytest
from hypothesis import settings

# Every world the suite starts means gloo on CPU, also where CUDA is available: processes
# that leave the device to gangmesh's default take cpu (GANGMESH_DEVICE), here and in every
# process the tests start. The tests of NCCL (tests/gpu) name their devices.
os.environ["GANGMESH_DEVICE"] = "cpu"

# What the processes of a session leave in the temporary directory (torchrun's agent never
# removes its torchelastic_* folder; a killed process leaves what it had open) goes into one
# folder of the session, removed as it ends (made once the command line is taken: a session
# refused for its arguments never ends).
_session_temp: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    _session_temp.append(tempfile.mkdtemp(prefix="gangmesh-tests-"))
    os.environ["TMPDIR"] = tempfile.tempdir = _session_temp[0]


def pytest_unconfigure(config: pytest.Config) -> None:
    for folder in _session_temp:
        shutil.rmtree(folder, ignore_errors=True)


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
