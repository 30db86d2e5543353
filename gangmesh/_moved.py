"""The module paths of before the layer sub-packages (``gangmesh.topology``,
``gangmesh.gang``, ...): importing one gives the module where it lives now, so code written
against them keeps working."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType

from typing_extensions import override

_LAYERS = {
    "plan": ("_checks", "cluster", "dim_keywords", "dims", "expert", "layout", "locality",
             "placement", "topology", "view"),
    "runtime": ("_backend", "_c10d", "_exit", "_validate", "communicators", "default_group",
                "environment", "fake_gang", "gang", "group_gang", "ops",
                "process_group_gang", "rank_order", "unbuilt_gang"),
    "runtime.faults": ("failure_reports", "last_words", "peer_state"),
    "assembly": ("aliases", "current", "factories", "gangs", "mesh_build", "mesh_read",
                 "mesh_views", "mesh_wrap", "record", "rendezvous", "setup"),
    "tools": ("check", "check_command", "check_report", "launch", "plan_command", "render",
              "svg", "svg_overview", "svg_shapes"),
}  # fmt: skip
"""The modules that were gangmesh.<name> before the layers, by the (sub-)package they moved
to; modules made since have no old path."""

MOVED = {module: layer for layer, modules in _LAYERS.items() for module in modules}
"""Old module name -> its sub-package."""


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``gangmesh.<old name>`` and hands out the moved module."""

    @override
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != "gangmesh" or name not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    @override
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        name = spec.name.rpartition(".")[2]
        return importlib.import_module(f"gangmesh.{MOVED[name]}.{name}")

    @override
    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the moved module ran when it was imported."""


def install() -> None:
    """Let the old paths import; once per process."""
    if not any(isinstance(finder, _OldPaths) for finder in sys.meta_path):
        sys.meta_path.append(_OldPaths())
