"""``python -m gangmesh``: the ``gangmesh`` command."""

import sys

from gangmesh.tools.cli import main

sys.exit(main())
