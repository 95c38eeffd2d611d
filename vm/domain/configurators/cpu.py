"""vCPU topology and model.

Upstream's default model is host-model. Under TCG there is no host CPU to model (and on
these hosts ``-cpu host``/``max`` abort on an MSR), so the default there is the
emulator's own; an explicit model is passed through.
"""

from __future__ import annotations

import dataclasses
import re

from vm.domain.errors import DomainError
from vm.domain.model import Cpu, Domain
from vm.domain.options import BuildOptions
from vm.domain.vmi import VmiSpec

_MODEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_HOST_MODELS = ("host-model", "host-passthrough")


def configure(*, vmi: VmiSpec, options: BuildOptions, domain: Domain) -> Domain:
    model = vmi.cpu_model
    if model is not None:
        if not isinstance(model, str) or not _MODEL.match(model):
            raise DomainError("spec.domain.cpu.model", f"not a CPU model name: {str(model)[:60]!r}")
        if model in _HOST_MODELS and options.accelerator == "tcg":
            raise DomainError(
                "spec.domain.cpu.model", f"{model} needs KVM, but this VM runs emulated (TCG)"
            )
    elif options.accelerator == "kvm":
        model = "host-model"
    cpu = Cpu(sockets=vmi.sockets, cores=vmi.cores, threads=vmi.threads, model=model)
    return dataclasses.replace(domain, cpu=cpu)
