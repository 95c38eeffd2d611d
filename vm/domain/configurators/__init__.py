"""One configurator per concern, each a pure function ``(vmi, options, domain) -> domain``.

Why it exists: as upstream's converter on main is a chain of small configurators, each
concern (cpu, memory, disks…) is decided in its own short module and tested alone; the
order of :data:`DEFAULT` is the order they run in (later ones may read earlier results).
"""

from __future__ import annotations

from vm.domain.configurators import (
    base,
    channels,
    cpu,
    disks,
    firmware,
    memory,
    network,
    rng,
    serial,
)
from vm.domain.configurators.types import Configurator

DEFAULT: tuple[Configurator, ...] = (
    base.configure,
    cpu.configure,
    memory.configure,
    firmware.configure,
    disks.configure,
    network.configure,
    serial.configure,
    channels.configure,
    rng.configure,
)

__all__ = ["DEFAULT", "Configurator"]
