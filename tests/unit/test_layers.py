"""The layer contract: each sub-package imports only its own layer and the layers below
(plan < runtime < assembly < tools), the planner imports no torch, and the old module
paths still import."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import gangmesh
from gangmesh import _moved

PACKAGE = Path(gangmesh.__file__).parent
ORDER = ("plan", "runtime", "assembly", "tools")
"""The layers, lowest first."""


def imported(path: Path) -> set[str]:
    """The modules ``path`` imports (``from gangmesh.x import y`` gives gangmesh.x and
    gangmesh.x.y: y may be a module), inside functions and TYPE_CHECKING blocks too."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "gangmesh" and parts[1] in ORDER else None


@pytest.mark.parametrize("layer", ORDER)
def test_a_layer_imports_only_itself_and_the_layers_below(layer):
    allowed = set(ORDER[: ORDER.index(layer) + 1])
    wrong = {
        f"{path.name} imports {module}"
        for path in (PACKAGE / layer).glob("*.py")
        for module in imported(path)
        if module.startswith("gangmesh")
        and (layer_of(module) not in allowed)
        and module not in ("gangmesh", "gangmesh.__version__")  # the version
    }
    assert sorted(wrong) == []


def test_the_planner_imports_no_torch():
    written = {
        f"{path.name} imports {module}"
        for path in (PACKAGE / "plan").glob("*.py")
        for module in imported(path)
        if module.split(".")[0] == "torch"
    }
    assert sorted(written) == []
    script = "import sys, gangmesh.plan.topology; print('torch' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "False", run.stderr


def test_every_module_lives_in_the_layer_the_old_paths_name():
    for layer in ORDER:
        modules = {path.stem for path in (PACKAGE / layer).glob("*.py")} - {"__init__"}
        assert modules == {m for m, where in _moved.MOVED.items() if where == layer} | (
            {"cli"} if layer == "tools" else set()
        )


@pytest.mark.parametrize("old", ["gangmesh.topology", "gangmesh.gang", "gangmesh.factories"])
def test_an_old_module_path_gives_the_moved_module(old):
    name = old.rpartition(".")[2]
    moved = importlib.import_module(f"gangmesh.{_moved.MOVED[name]}.{name}")
    assert importlib.import_module(old) is moved
