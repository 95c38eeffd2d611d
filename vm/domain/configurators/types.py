"""The configurator signature."""

from __future__ import annotations

from typing import Protocol

from vm.domain.model import Domain
from vm.domain.options import BuildOptions
from vm.domain.vmi import VmiSpec


class Configurator(Protocol):
    def __call__(self, *, vmi: VmiSpec, options: BuildOptions, domain: Domain) -> Domain: ...
