"""fairseq2.gang's names, served by gangmesh."""

from gangmesh import (  # noqa: F401
    FakeGang,
    Gang,
    GangError,
    Gangs,
    ProcessGroupGang,
    ReduceOperation,
    all_sum,
    broadcast_flag,
    create_fake_gangs,
    create_fsdp_gangs,
    create_parallel_gangs,
    maybe_get_current_gangs,
    setup_default_gang,
    setup_hybrid_fsdp_gangs,
    setup_parallel_gangs,
    setup_root_gang,
)
