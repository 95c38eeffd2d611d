"""The Debian cloud guest (cloud-init, SSH, qemu-guest-agent): its qcow2's path.

The image is ``rootdisk.cloudguest``'s (built and cached by it); ``ROOTDISK_CLOUD_GUEST``
may name a qcow2 of it instead (a cache made elsewhere). The test fails, with the reason,
when neither is there: a guest agent test without a guest proves nothing.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest


def cloud_guest_qcow2() -> Path:
    given = os.environ.get("ROOTDISK_CLOUD_GUEST")
    if given:
        return Path(given)
    try:
        module = importlib.import_module("rootdisk.cloudguest")
    except ImportError as err:
        pytest.fail(f"no cloud guest: rootdisk.cloudguest is missing ({err}) and "
                    "ROOTDISK_CLOUD_GUEST names no image")
    return Path(module.build_cloud_guest())

