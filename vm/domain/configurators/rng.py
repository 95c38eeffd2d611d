"""A virtio RNG fed from the host's /dev/urandom when ``devices.rng`` is set."""

from __future__ import annotations

import dataclasses

from vm.domain.model import Domain, Rng
from vm.domain.options import BuildOptions
from vm.domain.vmi import VmiSpec


def configure(*, vmi: VmiSpec, options: BuildOptions, domain: Domain) -> Domain:
    return dataclasses.replace(domain, rng=Rng() if vmi.rng else None)
