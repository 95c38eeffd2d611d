"""Guest memory, in bytes as upstream writes ``<memory unit="b">``."""

from __future__ import annotations

import dataclasses

from vm.domain.model import Domain
from vm.domain.options import BuildOptions
from vm.domain.vmi import VmiSpec


def configure(*, vmi: VmiSpec, options: BuildOptions, domain: Domain) -> Domain:
    return dataclasses.replace(domain, memory_bytes=vmi.memory_bytes)
