"""The shape of a test world: how many processes, on how many hosts, numbered how, on which
device.

A world of ``size`` processes on ``hosts`` hosts puts ``size // hosts`` processes on each.
``"consecutive"`` numbering gives a host consecutive ranks, as torchrun numbers them
(host 0: ranks 0 to k-1); ``"round_robin"`` deals the ranks out host by host, as some
schedulers do (SLURM's cyclic distribution: host 0 holds ranks 0, H, 2H, ...). The
variables each process gets are those a launcher would set on its host, and
``GANGMESH_DEVICE``: ``"cpu"`` (gloo, whatever GPUs the machine has) or ``"cuda"`` (NCCL, one
GPU per process of a host). Imports neither torch nor the rest of gangmesh.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NUMBERINGS", "WorldShape"]

NUMBERINGS = ("consecutive", "round_robin")
"""How ranks may be numbered over the hosts."""
DEVICES = ("cpu", "cuda")
"""The devices a world may run on."""


@dataclass(frozen=True)
class WorldShape:
    """``size`` processes on ``hosts`` hosts, numbered ``numbering``.

    >>> shape = WorldShape(4, hosts=2, numbering="round_robin")
    >>> [shape.host_of(rank) for rank in range(4)], [shape.local_rank(r) for r in range(4)]
    ([0, 1, 0, 1], [0, 0, 1, 1])

    :raises ValueError: a size or host count below 1, hosts that do not divide the size
        (every host holds as many processes), or an unknown numbering.
    """

    size: int
    hosts: int = 1
    numbering: str = "consecutive"
    device: str = "cpu"

    def __post_init__(self) -> None:
        for name in ("size", "hosts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
        if self.size % self.hosts:
            raise ValueError(
                f"hosts: expected a number of hosts that divides the {self.size} processes "
                f"(every host runs as many), got {self.hosts}"
            )
        if self.numbering not in NUMBERINGS:
            raise ValueError(f"numbering: expected one of {NUMBERINGS}, got {self.numbering!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device: expected one of {DEVICES}, got {self.device!r}")

    @property
    def per_host(self) -> int:
        """Processes on each host (LOCAL_WORLD_SIZE)."""
        return self.size // self.hosts

    def host_of(self, rank: int) -> int:
        """The host that runs ``rank``."""
        if self.numbering == "round_robin":
            return rank % self.hosts
        return rank // self.per_host

    def local_rank(self, rank: int) -> int:
        """The place of ``rank`` among the processes of its host (LOCAL_RANK)."""
        if self.numbering == "round_robin":
            return rank // self.hosts
        return rank % self.per_host

    def describe(self) -> str:
        """How the marker spells this shape."""
        device = "" if self.device == "cpu" else f", device={self.device!r}"
        if self.hosts == 1:
            return f"gangmesh_world({self.size}{device})"
        numbering = "" if self.numbering == "consecutive" else f", numbering={self.numbering!r}"
        return f"gangmesh_world({self.size}, hosts={self.hosts}{numbering}{device})"

    def environment(self, rank: int, master: str, port: int) -> dict[str, str]:
        """The variables torchrun would give ``rank`` on its host, the store at
        ``master:port`` (host 0's address)."""
        return {
            "RANK": str(rank),
            "WORLD_SIZE": str(self.size),
            "LOCAL_RANK": str(self.local_rank(rank)),
            "LOCAL_WORLD_SIZE": str(self.per_host),
            "GROUP_RANK": str(self.host_of(rank)),
            "ROLE_RANK": str(rank),
            "ROLE_WORLD_SIZE": str(self.size),
            "MASTER_ADDR": master,
            "MASTER_PORT": str(port),
            "GANGMESH_DEVICE": self.device,
        }
