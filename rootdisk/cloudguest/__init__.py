"""A real Debian 12 cloud guest, as users bring: cloud-init, SSH, the QEMU guest agent.

``build_cloud_guest(cache_root=None) -> Path`` returns a qcow2 built by mmdebstrap from
Debian's packages (``linux-image-cloud-amd64``, ``cloud-init``, ``openssh-server``,
``qemu-guest-agent``, systemd-networkd and systemd-resolved, ``sudo``), with no loop device
and no mount: a DOS-partitioned disk with a FAT16 boot partition (syslinux, the kernel,
its initramfs) and an ext4 root made from the tree with ``mkfs.ext4 -d``. Cached under
``$ROOTDISK_GUEST_CACHE`` (default ``<repo>/.state/guests``) by a key of the recipe and the
exact package versions apt installs. docs/guests.md says more.

Facts a VM definition needs (the constants below): there is no default user and root is
locked, so only a user made by the user-data's ``users:`` (with ``ssh_authorized_keys``)
can log in, by key; cloud-init reads only a NoCloud (``cidata``) or ConfigDrive
(``config-2``) disk; the root disk boots on virtio-blk and on SATA; the NIC model is
virtio-net; the guest agent listens on the virtio-serial port ``org.qemu.guest_agent.0``;
the console is the first serial port; 256 MiB of memory is enough. BIOS boot only (no
UEFI loader).
"""

from __future__ import annotations

from rootdisk.cloudguest.aptstate import AptStateError
from rootdisk.cloudguest.build import (
    CloudGuestError,
    build_cloud_guest,
    cache_dir,
    read_manifest,
)

DEFAULT_USER: str | None = None
DISK_BUSES = ("virtio", "sata")  # KubeVirt's disk.bus values the image boots from
NIC_MODEL = "virtio"  # KubeVirt's interface model (QEMU virtio-net-pci)
GUEST_AGENT_CHANNEL = "org.qemu.guest_agent.0"
SERIAL_CONSOLE = "ttyS0"
DATASOURCES = ("NoCloud", "ConfigDrive")
FIRMWARE = "bios"
MIN_MEMORY_MIB = 256  # booted to SSH and cloud-init done with 256 MiB under TCG

__all__ = [
    "DATASOURCES",
    "DEFAULT_USER",
    "DISK_BUSES",
    "FIRMWARE",
    "GUEST_AGENT_CHANNEL",
    "MIN_MEMORY_MIB",
    "NIC_MODEL",
    "SERIAL_CONSOLE",
    "AptStateError",
    "CloudGuestError",
    "build_cloud_guest",
    "cache_dir",
    "read_manifest",
]
