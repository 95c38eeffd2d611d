"""What the configurators need to know about the pod they run in.

Why it exists: the configurators are pure, so every fact that takes I/O to learn (which
volumes are block devices, which file systems take O_DIRECT, where OVMF is, which
accelerator works) is found by the launcher first and handed over in this one value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from vm.domain.model import Accelerator, Backing

PRIVATE_DIR = "/var/run/kubevirt-private"


@dataclass(frozen=True)
class Ovmf:
    """An installed OVMF build (Debian's ``ovmf`` package puts it in /usr/share/OVMF)."""

    code: str
    secure_code: str | None
    vars_template: str


@dataclass(frozen=True)
class PreparedDisk:
    """An image the launcher made for a volume that is not a claim: an emptyDisk's qcow2,
    an ephemeral volume's qcow2 overlay (with its backing claim), a cloud-init ISO."""

    volume: str
    path: str
    format: Literal["raw", "qcow2"]
    backing: Backing | None = None


@dataclass(frozen=True)
class BuildOptions:
    accelerator: Accelerator = "tcg"
    private_dir: str = PRIVATE_DIR
    dev_dir: str = "/dev"
    """Where Block volumes appear (``/dev/<volume>`` in a pod)."""
    block_volumes: frozenset[str] = frozenset()
    """Volumes present as block devices at /dev/<volume>; all others are Filesystem PVCs."""
    direct_io: frozenset[str] = frozenset()
    """Volumes whose storage accepts O_DIRECT (cache=none); the others get writethrough."""
    preallocated: frozenset[str] = frozenset()
    """Filesystem volumes whose disk.img is fully allocated (io=native applies)."""
    ovmf: Ovmf | None = None
    prepared: tuple[PreparedDisk, ...] = ()
    """The images made for emptyDisk, ephemeral and cloud-init volumes."""
    serial_socket: str = field(default="")
    """Where the launcher listens for the serial console; default <private-dir>/virt-serial0."""
    mac_seed: str = ""
    pod_ip: str | None = None
    """The pod's IP, where an interface's ``ports`` are forwarded from (``POD_IP``)."""
    unprivileged_port_start: int = 0
    """The node's ``net.ipv4.ip_unprivileged_port_start``: the launcher (uid 107, no
    capabilities, on the node's network) cannot bind a port below it."""
