"""Second names of gangmesh functions: the ones fairseq2's earlier releases and older docs use."""

from gangmesh.assembly.factories import create_fsdp_gangs, create_parallel_gangs
from gangmesh.assembly.setup import setup_root_gang

setup_default_gang = setup_root_gang
setup_parallel_gangs = create_parallel_gangs
setup_hybrid_fsdp_gangs = create_fsdp_gangs
