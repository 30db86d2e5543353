"""Test-wide settings."""

from hypothesis import settings

# Timing is measured in benchmarks/, not here: a loaded 2-core CI machine must not turn a
# slow example into a failure.
settings.register_profile("gangmesh", deadline=None)
settings.load_profile("gangmesh")
