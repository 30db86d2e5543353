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
        for path in (PACKAGE / layer).rglob("*.py")
        for module in imported(path)
        if module.startswith("gangmesh")
        and (layer_of(module) not in allowed)
        and module not in ("gangmesh", "gangmesh.__version__")  # the version
    }
    assert sorted(wrong) == []


FAULTS = "gangmesh.runtime.faults"


def test_the_failure_machinery_is_reached_through_its_package_only():
    # the Gang core, setup and the tools name gangmesh.runtime.faults, never a module in it
    deeper = {
        f"{path.relative_to(PACKAGE)} imports {module}"
        for path in PACKAGE.rglob("*.py")
        if path.parent != PACKAGE / "runtime" / "faults"
        for module in imported(path)
        if module.startswith(FAULTS + ".")
        and module.removeprefix(FAULTS + ".").split(".")[0] not in exported()
    }
    assert sorted(deeper) == []


def exported() -> set[str]:
    """The names gangmesh.runtime.faults exports (``from ... import name`` is fine for these)."""
    faults = importlib.import_module(FAULTS)
    return set(faults.__all__)


def test_the_failure_machinery_uses_only_the_gang_core_s_errors_and_environment():
    # one direction: the room needs GangError, the launcher's variables, torch's private
    # state and which groups gangmesh holds (only their failures are read as a peer's);
    # nothing else of the runtime
    allowed = {"gang", "environment", "_c10d", "communicators", "call_thread", "faults"}
    used = {
        f"{path.name} imports {module}"
        for path in (PACKAGE / "runtime" / "faults").glob("*.py")
        for module in imported(path)
        if module.startswith("gangmesh.runtime.") and module.split(".")[2] not in allowed
    }
    assert sorted(used) == []


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


def test_every_old_module_path_names_a_module_of_its_layer():
    for name, layer in _moved.MOVED.items():
        assert PACKAGE.joinpath(*layer.split("."), f"{name}.py").is_file(), f"gangmesh.{name}"
    old_top = {path.stem for path in PACKAGE.glob("*.py")}
    assert not old_top & set(_moved.MOVED), "a module that moved is back at the top"


@pytest.mark.parametrize("old", ["gangmesh.topology", "gangmesh.gang", "gangmesh.factories"])
def test_an_old_module_path_gives_the_moved_module(old):
    name = old.rpartition(".")[2]
    moved = importlib.import_module(f"gangmesh.{_moved.MOVED[name]}.{name}")
    assert importlib.import_module(old) is moved


MODULES = {
    ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): path
    for path in PACKAGE.rglob("*.py")
}
"""Every module of gangmesh, by name."""


def _is_type_checking(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports_of(path: Path, *, in_functions: bool) -> set[str]:
    """The modules (of gangmesh, and the top-level packages of the others) that ``path``
    imports where it runs: at the top (``in_functions`` false; blocks for type checkers
    left out), or inside functions."""
    tree = ast.parse(path.read_text())
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    if in_functions:
        nodes = [node for function in functions for node in ast.walk(function)]
    else:
        inside = {id(node) for function in functions for node in ast.walk(function)}
        hidden = {id(n) for s in tree.body if _is_type_checking(s) for n in ast.walk(s)}
        nodes = [n for n in ast.walk(tree) if id(n) not in inside and id(n) not in hidden]
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update(
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
                for a in node.names
            )
    return {name if name in MODULES else name.split(".")[0] for name in found}


def importers_of_torch() -> set[str]:
    """The modules of gangmesh that import torch when they are imported."""
    graph = {name: imports_of(path, in_functions=False) for name, path in MODULES.items()}
    found = {name for name, imports in graph.items() if "torch" in imports}
    while grown := {n for n, imports in graph.items() if imports & found} - found:
        found |= grown
    return found


def test_the_modules_import_each_other_without_a_cycle():
    """At the top, blocks for type checkers included: a module imported there for its
    types only would still be a circle hidden from the import system."""
    graph = {
        name: {m for m in imports_of(path, in_functions=False) if m in MODULES}
        | {m for m in imported(path) if m in MODULES and m != "gangmesh"}
        for name, path in MODULES.items()
        if name != "gangmesh"  # its imports for type checkers only name what it exports
    }
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"import cycle: {' -> '.join([*path, name])}"
        if name not in done:
            for module in sorted(graph.get(name, ())):
                visit(module, (*path, name))
            done.add(name)

    for name in sorted(graph):
        visit(name, ())


def test_a_function_imports_a_module_of_gangmesh_only_to_put_off_torch():
    torch_importers = importers_of_torch()
    needless = {
        f"{name} imports {module} inside a function"
        for name, path in MODULES.items()
        for module in imports_of(path, in_functions=True)
        if module in MODULES and (module not in torch_importers or name in torch_importers)
    }
    assert sorted(needless) == []


def test_no_module_is_longer_than_400_lines():
    long = {
        f"{name}: {n}"
        for name, path in MODULES.items()
        if (n := len(path.read_text().splitlines())) > 400
    }
    assert sorted(long) == []
