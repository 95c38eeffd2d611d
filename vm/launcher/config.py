"""The launcher's configuration, read once from its environment and arguments.

Why it exists: the pod passes everything through env (``VMI``, ``LAUNCHER_DRIVER``,
``USE_EMULATION``) and a few flags; parse them into one frozen value, failing with the
variable's name, so the rest of the launcher never reads ``os.environ``.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from vm.launcher.errors import ConfigError

DriverName = Literal["qemu", "libvirt"]
MAX_VMI_BYTES = 1024 * 1024


@dataclass(frozen=True)
class LauncherConfig:
    vmi: dict[str, Any]
    driver: DriverName = "qemu"
    use_emulation: bool = False
    socket_dir: str = "/var/run/kubevirt/sockets"
    private_dir: str = "/var/run/kubevirt-private"
    secret_dir: str = "/var/run/kubevirt-private/secret"  # noqa: S105 - a directory
    ephemeral_dir: str = "/var/run/kubevirt-ephemeral-disks"
    runtime_dir: str = "/var/run/libvirt"
    image_volume_dir: str = "/var/run/kubevirt-image-volume"
    """containerDisk images, each an image volume at ``disk_<volume index>``."""
    termination_log: str = "/dev/termination-log"
    dev_dir: str = "/dev"
    qemu_binary: str = "qemu-system-x86_64"
    libvirtd_binary: str = "libvirtd"
    kvm_probe_kernel: str | None = "/usr/share/rootdisk/kvm-probe/vmlinuz"
    kvm_probe_initrd: str | None = "/usr/share/rootdisk/kvm-probe/initrd.gz"
    pod_ip: str | None = None
    agent_poll_scale: float = 1.0
    """Every guest agent polling interval times this (env ``AGENT_POLL_SCALE``)."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m vm.launcher", description="Run one VirtualMachineInstance in this pod."
    )
    p.add_argument("--socket-dir", default=LauncherConfig.socket_dir)
    p.add_argument("--private-dir", default=LauncherConfig.private_dir)
    p.add_argument("--termination-log", default=LauncherConfig.termination_log)
    p.add_argument("--secret-dir", default=None,
                   help="the Secret volumes (default: <private-dir>/secret)")
    p.add_argument("--ephemeral-dir", default=LauncherConfig.ephemeral_dir,
                   help="cloud-init ISOs and ephemeral overlays (an emptyDir)")
    p.add_argument("--runtime-dir", default=LauncherConfig.runtime_dir,
                   help="emptyDisk images (an emptyDir)")
    p.add_argument("--image-volume-dir", default=LauncherConfig.image_volume_dir,
                   help="containerDisk image volumes (disk_<index>)")
    p.add_argument(
        "--dev-dir",
        default=LauncherConfig.dev_dir,
        help="where Block volumes appear as <dev-dir>/<volume> (tests only)",
    )
    p.add_argument("--qemu-binary", default=LauncherConfig.qemu_binary)
    p.add_argument("--libvirtd-binary", default=LauncherConfig.libvirtd_binary)
    return p


def parse(*, env: Mapping[str, str], argv: Sequence[str]) -> LauncherConfig:
    """:raise ConfigError: naming the variable that is missing or wrong."""
    args = _parser().parse_args(list(argv))
    raw = env.get("VMI")
    if not raw:
        raise ConfigError("VMI: the VirtualMachineInstance JSON is not set")
    if len(raw) > MAX_VMI_BYTES:
        raise ConfigError(f"VMI: longer than {MAX_VMI_BYTES} bytes")
    try:
        vmi = json.loads(raw)
    except ValueError as err:
        raise ConfigError(f"VMI: not JSON: {err}") from err
    if not isinstance(vmi, dict):
        raise ConfigError("VMI: must be a JSON object")
    driver = env.get("LAUNCHER_DRIVER", "qemu") or "qemu"
    if driver not in ("qemu", "libvirt"):
        raise ConfigError(f"LAUNCHER_DRIVER: must be qemu or libvirt, got {driver[:40]!r}")
    emulation = env.get("USE_EMULATION", "false").strip().lower()
    if emulation not in ("true", "false", ""):
        raise ConfigError(f"USE_EMULATION: must be true or false, got {emulation[:40]!r}")
    pod_ip = env.get("POD_IP") or None
    if pod_ip is not None:
        try:
            addr = ipaddress.ip_address(pod_ip)
        except ValueError as err:
            raise ConfigError(f"POD_IP: not an IP address: {pod_ip[:40]!r}") from err
        if not isinstance(addr, ipaddress.IPv4Address) or addr.is_unspecified:
            raise ConfigError(f"POD_IP: must be the pod's IPv4 address, got {pod_ip[:40]!r}")
    scale_text = env.get("AGENT_POLL_SCALE", "1") or "1"
    try:
        scale = float(scale_text)
    except ValueError:
        scale = -1.0
    if not 0.001 <= scale <= 100:
        raise ConfigError(
            f"AGENT_POLL_SCALE: must be a number from 0.001 to 100, got {scale_text[:40]!r}"
        )
    return LauncherConfig(
        vmi=vmi,
        pod_ip=pod_ip,
        agent_poll_scale=scale,
        driver=driver,  # type: ignore[arg-type]
        use_emulation=emulation == "true",
        socket_dir=args.socket_dir,
        private_dir=args.private_dir,
        secret_dir=args.secret_dir or os.path.join(args.private_dir, "secret"),
        ephemeral_dir=args.ephemeral_dir,
        runtime_dir=args.runtime_dir,
        image_volume_dir=args.image_volume_dir,
        termination_log=args.termination_log,
        dev_dir=args.dev_dir,
        qemu_binary=args.qemu_binary,
        libvirtd_binary=args.libvirtd_binary,
        kvm_probe_kernel=env.get("KVM_PROBE_KERNEL", LauncherConfig.kvm_probe_kernel),
        kvm_probe_initrd=env.get("KVM_PROBE_INITRD", LauncherConfig.kvm_probe_initrd),
    )


def termination_path(argv: Sequence[str]) -> str:
    """The termination log path, even when the rest of the configuration is wrong."""
    args, _ = _parser().parse_known_args(list(argv))
    return str(args.termination_log)
