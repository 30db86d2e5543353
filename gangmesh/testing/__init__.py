"""Tools to test parallel code: simulated ranks, hypothesis layouts, a pytest plugin.

``simulate_gangs`` is here; ``gangmesh.testing.strategies`` needs hypothesis
(``pip install 'gangmesh[testing]'``); ``gangmesh.testing.plugin`` is the pytest
plugin (fixtures ``simulated_gangs`` and ``root_gang``, marker ``gangmesh_world``),
loaded by pytest whenever gangmesh is installed.

Names load on first use, so that the pytest plugin does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["simulate_gangs"]

if TYPE_CHECKING:
    from gangmesh.testing.simulate import simulate_gangs


def __getattr__(name: str) -> Any:
    if name == "simulate_gangs":
        from gangmesh.testing.simulate import simulate_gangs

        globals()[name] = simulate_gangs
        return simulate_gangs
    raise AttributeError(f"module 'gangmesh.testing' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
