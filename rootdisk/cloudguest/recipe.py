"""What the Debian cloud guest is made of: pure data and pure decisions, no I/O.

Everything here enters the cache key (:func:`cache_key`), so editing a unit list, the
cloud-init configuration or the kernel command line builds a new image on the next call.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping

# Bump when the build steps change in a way the data below does not show.
RECIPE_REVISION = 1
SUITE = "bookworm"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
SOURCES = (
    f"deb [signed-by={KEYRING}] http://deb.debian.org/debian {SUITE} main",
    f"deb [signed-by={KEYRING}] http://deb.debian.org/debian {SUITE}-updates main",
    f"deb [signed-by={KEYRING}] http://deb.debian.org/debian-security {SUITE}-security main",
)
# mmdebstrap's "apt" variant (Essential: yes packages and apt) plus these, no Recommends.
# The generic kernel, not linux-image-cloud-amd64: the cloud flavour has no AHCI driver,
# and KubeVirt's q35 machine puts `bus: sata` disks and CD-ROMs on AHCI.
PACKAGES = (
    "linux-image-amd64",
    "cloud-init",
    "openssh-server",
    "qemu-guest-agent",
    "systemd-sysv",
    "systemd-resolved",  # DNS for systemd-networkd, cloud-init's network renderer here
    "sudo",
)
# dpkg never unpacks these (documentation a VM does not need; copyright files stay).
DPKG_OPTIONS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
    # driver families no virtual machine has (the generic kernel ships 400 MB of modules)
    *(
        f"path-exclude=/lib/modules/*/kernel/{tree}/*"
        for tree in (
            "drivers/gpu",
            "drivers/media",
            "drivers/net/wireless",
            "drivers/infiniband",
            "drivers/staging",
            "drivers/bluetooth",
            "drivers/iio",
            "drivers/isdn",
            "drivers/mtd",
            "drivers/nfc",
            "drivers/input/touchscreen",
            "drivers/usb/gadget",
            "net/bluetooth",
            "net/mac80211",
            "net/wireless",
            "sound",
        )
    ),
)
# The initramfs holds only what finds and mounts the root file system on virtio-blk,
# virtio-scsi, SATA (AHCI) or NVMe: small, so quick to load under TCG.
INITRAMFS_MODULES = (
    "virtio_pci",
    "virtio_blk",
    "virtio_scsi",
    "ahci",
    "nvme",
    "sd_mod",
    "sr_mod",  # a CD-ROM seed (cidata, config-2) must exist when ds-identify looks
    "ext4",
    "crc32c_generic",
)

MiB = 1024 * 1024
DISK_SIZE = 2048 * MiB  # virtual size; the root filesystem fills what the boot one leaves
BOOT_START = 1 * MiB
BOOT_SIZE = 64 * MiB  # FAT16: syslinux, the kernel and its initramfs
DISK_ID = "0x52d15c01"  # the MBR's disk identifier: PARTUUIDs are <id>-01 and <id>-02
ROOT_LABEL = "rootfs"
HOSTNAME = "debian"


def partuuid(number: int) -> str:
    return f"{DISK_ID.removeprefix('0x')}-{number:02d}"


KERNEL_ARGS = (
    f"root=PARTUUID={partuuid(2)}",
    "rw",
    "console=tty0",
    "console=ttyS0,115200",  # the last console= is /dev/console: the serial port
    "quiet",
    "fsck.mode=skip",
    # SCSI (and so SATA) disks are scanned before the initramfs hands over: ds-identify,
    # which runs as a systemd generator before udev, then sees a seed on a SATA CD-ROM.
    "scsi_mod.scan=sync",
)

# Units a cloud VM under test does not need at boot (timers that start apt, dpkg backups,
# TRIM): masked so they never run.
MASKED_UNITS = (
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "dpkg-db-backup.timer",
    "fstrim.timer",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "systemd-pstore.service",
    # its modules run in cloud-final (CLOUD_CFG below): one Python start of cloud-init
    # (seconds under TCG) less between boot and `cloud-init status: done`
    "cloud-config.service",
)
ENABLED_UNITS = ("systemd-networkd.service", "systemd-resolved.service")

# cloud-init: only the local sources (a NoCloud "cidata" or ConfigDrive "config-2" disk),
# never a network metadata service; no default user (user-data's `users:` makes them);
# host keys made at first boot (ed25519 and ecdsa: RSA key generation is slow under TCG);
# the module lists trimmed of what needs packages this image lacks or is slow under TCG
# (locale generation, ntp, growpart/resizefs); the config stage's modules run first in the
# final stage, whose process imports cloud-init anyway (cloud-config.service is masked; a
# stage that never started does not keep `cloud-init status` from saying done).
CLOUD_CFG: dict[str, object] = {
    "datasource_list": ["NoCloud", "ConfigDrive", "None"],
    "users": [],
    "disable_root": True,
    "ssh_pwauth": False,
    "ssh_deletekeys": True,
    "ssh_genkeytypes": ["ed25519", "ecdsa"],
    "system_info": {"network": {"renderers": ["networkd"]}},
    "cloud_init_modules": [
        "migrator",
        "seed_random",
        "bootcmd",
        "write_files",
        "mounts",
        "set_hostname",
        "update_hostname",
        "update_etc_hosts",
        "users_groups",
        "ssh",
    ],
    "cloud_config_modules": [],
    "cloud_final_modules": [
        "set_passwords",
        "apt_configure",
        "timezone",
        "runcmd",
        "package_update_upgrade_install",
        "write_files_deferred",
        "scripts_vendor",
        "scripts_per_once",
        "scripts_per_boot",
        "scripts_per_instance",
        "scripts_user",
        "ssh_authkey_fingerprints",
        "keys_to_console",
        "phone_home",
        "final_message",
        "power_state_change",
    ],
}

# Files written into the root filesystem (path relative to it -> text).
SSHD_DROPIN = "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin no\n"
WAIT_ONLINE_DROPIN = (
    "[Service]\nExecStart=\n"
    "ExecStart=/lib/systemd/systemd-networkd-wait-online --any --timeout=20\n"
)
# Host keys are cloud-init's job (its unit runs before sshd-keygen.service); when cloud-init
# made none (no seed disk) this one-shot makes them, so sshd still starts.
SSHD_KEYGEN_UNIT = """[Unit]
Description=OpenSSH host keys, when cloud-init made none
ConditionPathExistsGlob=!/etc/ssh/ssh_host_*_key
Before=ssh.service

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A
"""
SSH_AFTER_KEYGEN = "[Unit]\nWants=sshd-keygen.service\nAfter=sshd-keygen.service\n"
# cloud-init's entry point without Debian's console-script wrapper, whose
# importlib.metadata lookup of the distribution costs seconds per stage under TCG
# (the original stays as /usr/bin/cloud-init.distrib, a dpkg diversion).
CLOUD_INIT_ENTRY = """#!/usr/bin/python3
import sys

from cloudinit.cmd.main import main

sys.exit(main())
"""
JOURNALD_DROPIN = "[Journal]\nStorage=volatile\nRuntimeMaxUse=16M\n"


def cloud_cfg() -> str:
    """CLOUD_CFG as YAML, one key a line in flow style: ds-identify, which picks the
    datasources before cloud-init starts, reads ``datasource_list`` only from one line."""
    lines = [f"{key}: {json.dumps(value)}" for key, value in CLOUD_CFG.items()]
    return "#cloud-config\n" + "\n".join(lines) + "\n"


def fstab() -> str:
    return f"PARTUUID={partuuid(2)} / ext4 defaults,errors=remount-ro 0 0\n"


def initramfs_files() -> dict[str, str]:
    """initramfs-tools' configuration, in place before the kernel's package builds the
    initramfs (mmdebstrap's essential hook)."""
    hook = (
        "#!/bin/sh\n"
        'case "$1" in prereqs) echo; exit 0;; esac\n'
        ". /usr/share/initramfs-tools/hook-functions\n"
        f'for m in {" ".join(INITRAMFS_MODULES)}; do manual_add_modules "$m"; done\n'
    )
    return {
        "etc/initramfs-tools/conf.d/rootdisk.conf": "MODULES=list\n",
        "etc/initramfs-tools/hooks/rootdisk": hook,
    }


def root_files() -> dict[str, str]:
    """Configuration files of the guest, by path inside its root filesystem."""
    return {
        "etc/cloud/cloud.cfg.d/90-rootdisk.cfg": cloud_cfg(),
        "etc/ssh/sshd_config.d/50-rootdisk.conf": SSHD_DROPIN,
        "etc/systemd/system/systemd-networkd-wait-online.service.d/rootdisk.conf": (
            WAIT_ONLINE_DROPIN
        ),
        "etc/systemd/journald.conf.d/rootdisk.conf": JOURNALD_DROPIN,
        "etc/systemd/system/sshd-keygen.service": SSHD_KEYGEN_UNIT,
        "etc/systemd/system/ssh.service.d/rootdisk.conf": SSH_AFTER_KEYGEN,
        "etc/fstab": fstab(),
        "etc/hostname": HOSTNAME + "\n",
        "etc/hosts": f"127.0.0.1 localhost\n127.0.1.1 {HOSTNAME}\n::1 localhost\n",
        "etc/machine-id": "",  # each VM makes its own at first boot
    }


DIVERTED = {"usr/bin/cloud-init": CLOUD_INIT_ENTRY}  # path -> the image's own version


def syslinux_cfg(kernel: str, initrd: str) -> str:
    return (
        "SERIAL 0 115200\nPROMPT 0\nTIMEOUT 0\nDEFAULT debian\nLABEL debian\n"
        f"  KERNEL {kernel}\n  INITRD {initrd}\n  APPEND {' '.join(KERNEL_ARGS)}\n"
    )


def sfdisk_script() -> str:
    """A DOS label: a bootable FAT16 partition, then the Linux root to the disk's end."""
    boot_start = BOOT_START // 512
    root_start = (BOOT_START + BOOT_SIZE) // 512
    return (
        f"label: dos\nlabel-id: {DISK_ID}\n"
        f"start={boot_start}, size={BOOT_SIZE // 512}, type=6, bootable\n"
        f"start={root_start}, type=83\n"
    )


def root_size() -> int:
    return DISK_SIZE - BOOT_START - BOOT_SIZE


# --- what apt would install -----------------------------------------------------------------

_INST = re.compile(r"^Inst (\S+) (?:\[[^\]]*\] )?\((\S+) ")


def simulated_installs(apt_output: str) -> dict[str, str]:
    """``package -> version`` from ``apt-get install --simulate`` output (its ``Inst`` lines)."""
    found: dict[str, str] = {}
    for line in apt_output.splitlines():
        m = _INST.match(line)
        if m:
            found[m.group(1)] = m.group(2)
    return found


def essential_packages(packages_index: str) -> list[str]:
    """Names of the ``Essential: yes`` packages in a Packages index's text."""
    names: set[str] = set()
    package = ""
    for line in packages_index.splitlines():
        if line.startswith("Package:"):
            package = line.split(":", 1)[1].strip()
        elif line.strip() == "Essential: yes" and package:
            names.add(package)
    return sorted(names)


def cache_key(versions: Mapping[str, str], extra: Iterable[str] = ()) -> str:
    """The image's content key: the recipe (this module's data) and apt's exact versions."""
    recipe = {
        "revision": RECIPE_REVISION,
        "suite": SUITE,
        "sources": SOURCES,
        "packages": PACKAGES,
        "dpkg": DPKG_OPTIONS,
        "disk": [DISK_SIZE, BOOT_START, BOOT_SIZE, DISK_ID, ROOT_LABEL],
        "kernel_args": KERNEL_ARGS,
        "masked": MASKED_UNITS,
        "enabled": ENABLED_UNITS,
        "files": root_files(),
        "initramfs": initramfs_files(),
        "diverted": DIVERTED,
        "syslinux": syslinux_cfg("K", "I"),
        "versions": sorted(versions.items()),
        "extra": list(extra),
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()
