"""The guest agent channel, on every domain as upstream's converter adds it
(``org.qemu.guest_agent.0``, a virtio-serial port backed by a unix socket)."""

from __future__ import annotations

import dataclasses
import posixpath

from vm.domain.model import AgentChannel, Domain
from vm.domain.options import BuildOptions
from vm.domain.vmi import VmiSpec

AGENT_SOCKET = "org.qemu.guest_agent.0"


def agent_socket(private_dir: str) -> str:
    return posixpath.join(private_dir, AGENT_SOCKET)


def configure(*, vmi: VmiSpec, options: BuildOptions, domain: Domain) -> Domain:
    return dataclasses.replace(
        domain, agent=AgentChannel(socket_path=agent_socket(options.private_dir))
    )
