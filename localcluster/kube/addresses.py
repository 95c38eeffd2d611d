"""Addresses in 127.0.0.0/8 for pods and Services, so servers in pods don't collide.

Every 127.x.y.z address is local on Linux without configuration, so a server in a pod
binds its pod IP and another pod's server on the same port does not clash. Pods get
addresses from 127.1.0.0/16 and Services from 127.2.0.0/16 by default; addresses are
handed out lowest first and returned on release.

Two clusters on one machine (two data dirs) would hand out the same addresses, so
:func:`networks_for` picks the pair of /16s from the data dir's path: stable across
restarts of one cluster, different between clusters (with high probability). Where two
do meet (112 pairs to choose from), a pod address that some process on the machine is
already listening on is skipped when handed out (``busy``: :func:`listening_addresses`
reads the kernel's socket tables), so a pod never inherits another cluster's port.
"""

from __future__ import annotations

import ipaddress
import threading
import zlib
from collections.abc import Callable, Iterable

PROC_NET = ("/proc/net/tcp", "/proc/net/udp")


def networks_for(key: str) -> tuple[str, str]:
    """(pod CIDR, service CIDR) for a cluster identified by ``key`` (its data dir)."""
    second = 16 + (zlib.crc32(key.encode()) % 112) * 2  # 16..238, even: pods; odd: services
    return f"127.{second}.0.0/16", f"127.{second + 1}.0.0/16"


class AddressExhausted(Exception):
    """Every address of the range is in use."""


def parse_proc_net(lines: Iterable[str]) -> set[str]:
    """Local IPv4 addresses bound in a ``/proc/net/{tcp,udp}`` table (pure)."""
    out = set()
    for line in lines:
        fields = line.split()
        if len(fields) < 2 or ":" not in fields[1] or fields[0] == "sl":
            continue
        hex_addr = fields[1].split(":", 1)[0]
        if len(hex_addr) != 8:
            continue
        try:
            out.add(str(ipaddress.IPv4Address(bytes.fromhex(hex_addr)[::-1])))
        except ValueError:
            continue
    return out


def listening_addresses() -> set[str]:
    """Addresses that sockets on this machine are bound to (TCP and UDP, IPv4)."""
    found: set[str] = set()
    for path in PROC_NET:
        try:
            with open(path, encoding="ascii", errors="replace") as table:
                found |= parse_proc_net(table)
        except OSError:
            continue
    return found


class AddressPool:
    def __init__(self, cidr: str, *, busy: Callable[[], set[str]] | None = None) -> None:
        """``busy`` names addresses taken outside this pool (other clusters' pods)."""
        self.network = ipaddress.ip_network(cidr)
        self._busy = busy
        if not self.network.subnet_of(ipaddress.ip_network("127.0.0.0/8")):  # type: ignore[arg-type]
            raise ValueError(f"{cidr} is not inside 127.0.0.0/8")
        self._used: dict[str, str] = {}  # address -> owner
        self._lock = threading.Lock()

    def allocate(self, owner: str) -> str:
        """The owner's address (the same one if it already has one)."""
        with self._lock:
            for addr, who in self._used.items():
                if who == owner:
                    return addr
            busy = self._busy() if self._busy else set()
            for host in self.network.hosts():
                addr = str(host)
                if addr not in self._used and addr not in busy and not addr.endswith(".0"):
                    self._used[addr] = owner
                    return addr
        raise AddressExhausted(f"no free address left in {self.network}")

    def reserve(self, addr: str, owner: str) -> bool:
        """Claim a known address (one recorded before a restart); False if taken."""
        with self._lock:
            if ipaddress.ip_address(addr) not in self.network:
                return False
            if self._used.get(addr, owner) != owner:
                return False
            self._used[addr] = owner
            return True

    def release(self, owner: str) -> None:
        with self._lock:
            for addr in [a for a, who in self._used.items() if who == owner]:
                del self._used[addr]

    def in_use(self) -> dict[str, str]:
        with self._lock:
            return dict(self._used)
