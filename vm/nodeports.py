"""This node's lowest unprivileged port, as the launcher and virt-api both see it.

localcluster's pods share the node's network (see docs/localcluster-pods.md), so a
launcher (uid 107, no capabilities) cannot listen on a port below the node's
``net.ipv4.ip_unprivileged_port_start`` at its pod IP; ``vm.domain.podnet.node_port``
moves such a port up, and virt-api's port-forward dials the same place. Both read the
value here, so they agree.
"""

from __future__ import annotations

SYSCTL = "/proc/sys/net/ipv4/ip_unprivileged_port_start"
DEFAULT = 1024  # the kernel's default, when the sysctl cannot be read


def unprivileged_port_start(path: str = SYSCTL) -> int:
    try:
        with open(path, encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return DEFAULT
