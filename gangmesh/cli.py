"""``python -m gangmesh.cli`` and the old path of the ``gangmesh`` command's module
(:mod:`gangmesh.tools.cli`)."""

from __future__ import annotations

import sys

from gangmesh.tools.cli import build_parser, help_text, main

__all__ = ["build_parser", "help_text", "main"]

if __name__ == "__main__":
    sys.exit(main())
