"""BIOS (SeaBIOS, the default) or EFI (OVMF on read-only pflash with a per-VM NVRAM copy).

EFI is offered only where an OVMF build was found (``options.ovmf``); asking for it
elsewhere is a clear error rather than a VM that never boots. Secure boot needs the
secure-boot OVMF build and SMM, as upstream.
"""

from __future__ import annotations

import dataclasses
import posixpath

from vm.domain.errors import DomainError, UnsupportedError
from vm.domain.model import Domain, Firmware
from vm.domain.options import BuildOptions
from vm.domain.vmi import VmiSpec

FIELD = "spec.domain.firmware.bootloader.efi"


def configure(*, vmi: VmiSpec, options: BuildOptions, domain: Domain) -> Domain:
    if not vmi.efi:
        return dataclasses.replace(domain, firmware=Firmware(kind="bios"), smm=vmi.smm)
    if not vmi.acpi:
        raise DomainError("spec.domain.features.acpi", "EFI firmware requires ACPI on x86_64")
    ovmf = options.ovmf
    if ovmf is None:
        raise UnsupportedError(FIELD, "EFI requested, but no OVMF firmware is installed here")
    loader = ovmf.code
    if vmi.secure_boot:
        if ovmf.secure_code is None:
            raise UnsupportedError(f"{FIELD}.secureBoot", "no secure-boot OVMF build is installed")
        if not vmi.smm:
            raise DomainError("spec.domain.features.smm", "EFI secure boot requires SMM")
        loader = ovmf.secure_code
    nvram = posixpath.join(options.private_dir, "libvirt", "qemu", "nvram", f"{vmi.name}_VARS.fd")
    firmware = Firmware(
        kind="efi",
        loader=loader,
        nvram=nvram,
        nvram_template=ovmf.vars_template,
        secure_boot=vmi.secure_boot,
    )
    return dataclasses.replace(domain, firmware=firmware, smm=vmi.smm)
