"""Name, UUID, accelerator, machine and ACPI: the domain's identity.

Upstream names the domain ``<namespace>_<name>``; the UUID is the VMI's firmware UUID
when set, else its metadata.uid (upstream defaults firmware.uuid in a webhook; the uid
is as stable for the VMI's life).
"""

from __future__ import annotations

import dataclasses
import uuid

from vm.domain.errors import DomainError
from vm.domain.model import Domain
from vm.domain.options import BuildOptions
from vm.domain.vmi import VmiSpec


def _uuid(text: str, field: str) -> str:
    try:
        return str(uuid.UUID(text))
    except ValueError as err:
        raise DomainError(field, f"not a UUID: {text[:60]!r}") from err


def domain_uuid(vmi: VmiSpec) -> str:
    """The domain's (and SMBIOS') UUID: ``spec.domain.firmware.uuid``, else the VMI's uid."""
    if vmi.firmware_uuid is not None:
        return _uuid(vmi.firmware_uuid, "spec.domain.firmware.uuid")
    return _uuid(vmi.uid, "metadata.uid")


def configure(*, vmi: VmiSpec, options: BuildOptions, domain: Domain) -> Domain:
    return dataclasses.replace(
        domain,
        name=vmi.domain_name,
        uuid=domain_uuid(vmi),
        accelerator=options.accelerator,
        machine=vmi.machine,
        acpi=vmi.acpi,
        start_paused=vmi.start_paused,
    )
