"""Build a :class:`~vm.domain.model.Domain` from a VMI by running the configurators.

Why it exists: the one entry point the launcher calls; it parses and checks the VMI once
(:func:`vm.domain.vmi.parse_vmi`) and folds the configurators over an empty domain.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from vm.domain.configurators import DEFAULT, Configurator
from vm.domain.model import Domain
from vm.domain.options import BuildOptions
from vm.domain.vmi import VmiSpec, parse_vmi


def build_spec(
    *, spec: VmiSpec, options: BuildOptions, configurators: Iterable[Configurator] = DEFAULT
) -> Domain:
    domain = Domain(name="", uuid="", accelerator=options.accelerator)
    for configure in configurators:
        domain = configure(vmi=spec, options=options, domain=domain)
    return domain


def build(
    *, vmi: dict[str, Any], options: BuildOptions, configurators: Iterable[Configurator] = DEFAULT
) -> Domain:
    """:raise vm.domain.errors.DomainError: naming the VMI field that is wrong."""
    return build_spec(spec=parse_vmi(vmi), options=options, configurators=configurators)
