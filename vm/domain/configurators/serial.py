"""The serial console (COM1), on a unix socket the launcher listens on.

Upstream puts ``<serial type="unix">`` on ``virt-serial0`` and logs it with a sidecar;
the launcher here is both the listener and the logger (see vm.launcher.console).
"""

from __future__ import annotations

import dataclasses
import posixpath

from vm.domain.model import Domain, Serial
from vm.domain.options import BuildOptions
from vm.domain.vmi import VmiSpec


def configure(*, vmi: VmiSpec, options: BuildOptions, domain: Domain) -> Domain:
    if not vmi.serial_console:
        return dataclasses.replace(domain, serial=None)
    path = options.serial_socket or posixpath.join(options.private_dir, "virt-serial0")
    return dataclasses.replace(domain, serial=Serial(socket_path=path))
