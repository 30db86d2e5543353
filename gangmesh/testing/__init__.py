"""Tools to test parallel code: simulated ranks, hypothesis layouts, a pytest plugin.

``simulate_gangs`` is here; ``gangmesh.testing.strategies`` needs hypothesis
(``pip install 'gangmesh[testing]'``).
"""

from gangmesh.testing.simulate import simulate_gangs

__all__ = ["simulate_gangs"]
