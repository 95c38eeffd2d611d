"""The VMI a VM starts carries a stable firmware UUID (upstream's
setupStableFirmwareUUID/CalculateLegacyUUID): the same for every start of the VM, so
cloud-init's instance-id does not change with a restart."""

from __future__ import annotations

import hashlib
import uuid

from vm.controller.instance import vmi_from_vm
from vm.domain.vmi import parse_vmi


def vm(firmware: dict | None = None) -> dict:
    domain: dict = {"resources": {"requests": {"memory": "64Mi"}}}
    if firmware is not None:
        domain["firmware"] = firmware
    return {"metadata": {"name": "web", "namespace": "ns", "uid": "vm-uid"},
            "spec": {"template": {"spec": {"domain": domain}}}}


def sha1_uuid(namespace: str, name: str) -> str:
    """RFC 4122 section 4.3 by hand (what Go's uuid.NewSHA1 does)."""
    digest = bytearray(hashlib.sha1(uuid.UUID(namespace).bytes + name.encode(),
                                    usedforsecurity=False).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    return str(uuid.UUID(bytes=bytes(digest)))


def test_firmware_uuid_is_the_legacy_uuid_of_the_vm_name() -> None:
    want = sha1_uuid("6a1a24a1-4061-4607-8bf4-a3963d0c5895", "web")
    for firmware in (None, {}, {"uuid": ""}, {"bootloader": {"bios": {}}}):
        vmi = vmi_from_vm(vm=vm(firmware), paused=False)
        assert vmi["spec"]["domain"]["firmware"]["uuid"] == want
    assert vmi["spec"]["domain"]["firmware"]["bootloader"] == {"bios": {}}
    # the launcher takes it as the domain's UUID (and cloud-init's instance-id)
    vmi["metadata"]["uid"] = "6a1c2b9e-8d4e-4c1f-9a57-3f0e5b7c1d22"
    assert parse_vmi(vmi).firmware_uuid == want


def test_a_template_uuid_is_kept_and_the_template_untouched() -> None:
    source = vm({"uuid": "0b2a0a1e-1111-4c1f-9a57-3f0e5b7c1d22"})
    vmi = vmi_from_vm(vm=source, paused=False)
    assert vmi["spec"]["domain"]["firmware"]["uuid"] == "0b2a0a1e-1111-4c1f-9a57-3f0e5b7c1d22"
    plain = vm()
    vmi_from_vm(vm=plain, paused=False)
    assert "firmware" not in plain["spec"]["template"]["spec"]["domain"]
