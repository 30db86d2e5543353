"""The package's public names: one list, loaded on first use, torch only when needed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import gangmesh as gm

REPO = Path(__file__).parents[2]


def test_every_public_name_loads_and_star_import_gives_exactly_those():
    assert gm.__all__ == sorted(gm.__all__) and len(set(gm.__all__)) == len(gm.__all__)
    for name in gm.__all__:
        assert getattr(gm, name) is not None, name
    namespace: dict[str, object] = {}
    exec("from gangmesh import *", namespace)
    assert sorted(name for name in namespace if name != "__builtins__") == gm.__all__
    assert set(gm.__all__) <= set(dir(gm))
    assert gm.Gangs.__module__ == "gangmesh.gangs" and gm.testing.__name__ == "gangmesh.testing"
    assert gm.setup_parallel_gangs is gm.create_parallel_gangs
    assert gm.maybe_get_current_gangs.__module__ == "gangmesh.current"


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'create_gang'"):
        gm.create_gang  # noqa: B018


def test_importing_the_package_and_reading_its_names_imports_no_torch():
    script = "import sys, gangmesh; gangmesh.__all__; print(sorted(m for m in sys.modules if m == 'torch'))"
    run = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True, text=True, timeout=120, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
