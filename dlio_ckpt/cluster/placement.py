"""Which host each process is on, and so who acts for a host: the checks, markers and clean-up of a
node or peer tier are each host's own (its acting rank: the host's lowest), where a shared tier's are
rank 0's alone; and on a peer tier, which hosts keep each host's part (ring or clique).

Why apart from the communicator: the same run is placed on real hosts (every process says its host
name; ``scripts/pretend_host`` makes such hosts of namespaces on one machine) or on pretend ones
(``workload.hosts.simulate``: the processes in N blocks of equal size), and nothing downstream tells
the difference but a pretend host's node folder, so that what a test checks on one machine is what
runs under ``mpiexec -f hostfile`` or Slurm.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlio_ckpt.cluster.comm import Comm
from dlio_ckpt.cluster.host import hostname
from dlio_ckpt.errors import ConfigError

SIMULATED = "simhost"  # pretend hosts are simhost0, simhost1, ...


@dataclass(frozen=True)
class Placement:
    names: tuple[str, ...]  # the host of each process, by rank
    rank: int  # this process
    simulated: bool

    @property
    def hosts(self) -> list[str]:
        """Every host once, in the order of its first rank (host index = position here)."""
        return list(dict.fromkeys(self.names))

    @property
    def host(self) -> str:
        return self.names[self.rank]

    @property
    def host_index(self) -> int:
        return self.hosts.index(self.host)

    def members(self, host: str | None = None) -> list[int]:
        """The ranks on ``host`` (this process's by default)."""
        return [r for r, name in enumerate(self.names) if name == (host or self.host)]

    @property
    def local_rank(self) -> int:
        return self.members().index(self.rank)

    @property
    def acts(self) -> bool:
        """Whether this process acts for its host (its lowest rank)."""
        return self.local_rank == 0

    @property
    def node_folder(self) -> str | None:
        """The sub-folder that keeps a pretend host's node-scoped copies apart on one machine (None on real
        hosts: there each host's own storage is its copy)."""
        return self.host if self.simulated else None

    def peers(self, replicas: int, replication: str) -> Partners:
        """This host's partners on a peer tier (by host index)."""
        return partners(len(self.hosts), self.host_index, replicas, replication)

    def describe(self) -> dict[str, object]:
        return {"simulated": self.simulated, "hosts": {h: self.members(h) for h in self.hosts}}


def place(comm: Comm, simulate: int) -> Placement:
    """Every process's host: pretend ones in rank order (``simulate`` > 0), else the real host names."""
    if not simulate:
        return Placement(tuple(comm.allgather(hostname())), comm.rank, False)
    if simulate > comm.size or comm.size % simulate:
        raise ConfigError("workload.hosts.simulate", simulate, f"must divide the {comm.size} processes (each "
                          "pretend host gets the same number of them)")
    per = comm.size // simulate
    return Placement(tuple(f"{SIMULATED}{r // per}" for r in range(comm.size)), comm.rank, True)


@dataclass(frozen=True)
class Partners:
    """Whom this host sends its share to and whose shares it keeps, round by round."""

    send_to: tuple[int, ...]  # host index per round
    receive_from: tuple[int, ...]


def partners(hosts: int, host: int, replicas: int, topology: str) -> Partners:
    """``ring``: host h keeps the shares of h-1 .. h-R and sends its own to h+1 .. h+R. ``clique``: the
    hosts in groups of R+1 consecutive ones, each keeping every other member's share."""
    if topology == "clique":
        size = replicas + 1
        first, pos = host - host % size, host % size
        return Partners(tuple(first + (pos + j) % size for j in range(1, size)),
                        tuple(first + (pos - j) % size for j in range(1, size)))
    return Partners(tuple((host + j) % hosts for j in range(1, replicas + 1)),
                    tuple((host - j) % hosts for j in range(1, replicas + 1)))


def surviving_keeper(hosts: int, lost: int, replicas: int, topology: str, gone: list[int]) -> int | None:
    """The first host still there that keeps ``lost``'s part on a peer tier (None: every keeper is ``gone``)."""
    keepers = partners(hosts, lost, replicas, topology).send_to
    return next((h for h in keepers if h not in gone), None)
