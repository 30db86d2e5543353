"""``gangmesh check`` as one rank of a job the test launched; the arguments are check's."""

import sys

from gangmesh.tools.cli import main

sys.exit(main(["check", *sys.argv[1:]]))
