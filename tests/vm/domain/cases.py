"""VMIs and pod facts covering the configurators' combinations, shared by the render,
libvirt and QEMU acceptance tests."""

from __future__ import annotations

from typing import Any

from vm.domain.options import BuildOptions, Ovmf

UID = "6a1c2b9e-8d4e-4c1f-9a57-3f0e5b7c1d22"
OVMF = Ovmf(
    code="/usr/share/OVMF/OVMF_CODE_4M.fd",
    secure_code="/usr/share/OVMF/OVMF_CODE_4M.secboot.fd",
    vars_template="/usr/share/OVMF/OVMF_VARS_4M.fd",
)


def vmi(
    *,
    disks: list[dict[str, Any]],
    volumes: list[str] | None = None,
    domain: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    names = volumes if volumes is not None else [d["name"] for d in disks]
    dom: dict[str, Any] = {
        "resources": {"requests": {"memory": "128Mi"}},
        "devices": {"disks": disks},
    }
    for key, value in (domain or {}).items():
        if key == "devices":
            dom["devices"].update(value)
        else:
            dom[key] = value
    return {
        "metadata": {"name": "vm1", "namespace": "ns1", "uid": UID},
        "spec": {
            "domain": dom,
            "volumes": [
                {"name": n, "persistentVolumeClaim": {"claimName": f"pvc-{n}"}} for n in names
            ],
            **spec,
        },
    }


MINIMAL = vmi(disks=[{"name": "root"}])

FULL = vmi(
    disks=[
        {"name": "root", "disk": {"bus": "virtio"}, "bootOrder": 1, "serial": "ROOT01"},
        {"name": "data", "disk": {"bus": "scsi"}, "cache": "writethrough"},
        {"name": "iso", "cdrom": {"bus": "sata"}, "bootOrder": 2},
        {"name": "blk", "disk": {"bus": "scsi"}},
    ],
    domain={"cpu": {"sockets": 2, "cores": 2, "threads": 1}, "devices": {
        "rng": {},
        "interfaces": [{"name": "default", "masquerade": {}, "macAddress": "02:00:00:00:00:01",
                        "ports": [{"name": "ssh", "port": 2222},
                                  {"port": 5353, "protocol": "UDP"}]}],
    }},
    networks=[{"name": "default", "pod": {"vmNetworkCIDR": "10.11.12.0/24"}}],
)
FULL_OPTIONS = dict(
    pod_ip="127.1.0.9",
    unprivileged_port_start=1024,
    block_volumes=frozenset({"blk"}),
    direct_io=frozenset({"root", "blk"}),
    preallocated=frozenset({"root"}),
)

EFI_SECURE = vmi(
    disks=[{"name": "root", "disk": {"bus": "virtio"}}],
    domain={
        "firmware": {"bootloader": {"efi": {}}, "uuid": "0d3b2c1a-0000-4000-8000-000000000001"},
        "features": {"smm": {}},
    },
)

EFI_PLAIN_NO_NET = vmi(
    disks=[{"name": "root", "disk": {"bus": "sata"}}],
    domain={
        "firmware": {"bootloader": {"efi": {"secureBoot": False}}},
        "cpu": {"model": "qemu64"},
        "devices": {"autoattachPodInterface": False, "autoattachSerialConsole": False},
    },
)

NO_ACPI = vmi(
    disks=[{"name": "root", "disk": {"bus": "virtio"}}],
    domain={"features": {"acpi": {"enabled": False}}},
)

CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "minimal": (MINIMAL, {}),
    "full": (FULL, FULL_OPTIONS),
    "efi-secure": (EFI_SECURE, {}),
    "efi-plain-no-net": (EFI_PLAIN_NO_NET, {}),
    "no-acpi": (NO_ACPI, {}),
}


def options(
    private_dir: str = "/var/run/kubevirt-private", dev_dir: str = "/dev", **extra: Any
) -> BuildOptions:
    return BuildOptions(private_dir=private_dir, dev_dir=dev_dir, ovmf=OVMF, **extra)
