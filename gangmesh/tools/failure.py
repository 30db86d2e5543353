"""The error a ``gangmesh`` command reports in one line, as it is."""

from __future__ import annotations


class Failure(Exception):
    """An error to report in one line as it is, without option spelling."""
