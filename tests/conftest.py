"""Test-wide settings."""

from hypothesis import settings

# pytester runs pytest sessions in a temporary directory (tests of the gangmesh pytest plugin).
pytest_plugins = ["pytester"]

# Timing is measured in benchmarks/, not here: a loaded 2-core CI machine must not turn a
# slow example into a failure.
settings.register_profile("gangmesh", deadline=None)
settings.load_profile("gangmesh")
