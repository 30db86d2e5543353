"""The package's public names: one list, loaded on first use, torch only when needed."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile
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
    assert (
        gm.Gangs.__module__ == "gangmesh.assembly.gangs"
        and gm.testing.__name__ == "gangmesh.testing"
    )
    assert gm.setup_parallel_gangs is gm.create_parallel_gangs
    assert gm.maybe_get_current_gangs.__module__ == "gangmesh.assembly.current"


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


def test_the_names_loaded_at_run_time_are_the_names_type_checkers_read():
    tree = ast.parse((REPO / "gangmesh" / "__init__.py").read_text(encoding="utf-8"))
    (block,) = (
        node
        for node in tree.body
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name)
        if node.test.id == "TYPE_CHECKING"
    )
    typed = {
        alias.asname or alias.name: str(node.module)
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert typed == {name: gm._exports()[name] for name in gm.__all__}


def test_the_package_imports_and_plans_from_a_zip(tmp_path):
    archive = tmp_path / "gangmesh.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for path in sorted((REPO / "gangmesh").rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                zipped.write(path, path.relative_to(REPO).as_posix())
    script = (
        "import gangmesh as gm; t = gm.MeshTopology(8, tp=2); "
        "print(gm.__file__.startswith(sys.argv[1]), t.dims['tp'], len(gm.__all__) > 0)"
    )
    run = subprocess.run(
        [sys.executable, "-c", "import sys; " + script, str(archive)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(archive)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["True", "2", "True"]
