"""Controller sets: a name on the command line → the modules kopf loads, the webhooks served.

Every handler module of a set is required: one that cannot be imported is an error.
Each webhook is ``"module:function"``; the function takes the AdmissionReview body and a
keyword ``exists(kind, name, namespace)`` lookup and returns the AdmissionReview answer.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Webhook = Callable[..., dict[str, Any]]


@dataclass(frozen=True)
class ControllerSet:
    handlers: tuple[str, ...]
    webhooks: Mapping[str, str] = field(default_factory=dict)
    lease: str = ""


SETS: dict[str, ControllerSet] = {
    "cdi": ControllerSet(
        handlers=("cdi.handlers", "populators.handlers"),
        webhooks={"/validate-datavolumes": "cdi.admission:review",
                  "/validate-dataimportcrons": "cdi.admission:review",
                  "/mutate-datavolumes": "cdi.admission:mutate"},
        lease="rootdisk-cdi",
    ),
    # The VM and VMI controllers (KubeVirt's virt-controller); virt-api serves their webhooks.
    "vm": ControllerSet(
        handlers=("vm.controller.handlers", "vm.vmi.handlers"),
        lease="rootdisk-vm",
    ),
    # The node handler (virt-handler), a DaemonSet: one Lease per node, so every node's
    # handler leads for its own node (NODE_NAME comes from the pod's downward API).
    "handler": ControllerSet(
        handlers=("vm.handler.handlers",),
        lease=f"rootdisk-handler-{os.environ.get('NODE_NAME', 'unknown')}",
    ),
}


class UnknownControllerSet(ValueError):
    pass


def resolve(names: Sequence[str]) -> list[ControllerSet]:
    unknown = [n for n in names if n not in SETS]
    if unknown or not names:
        raise UnknownControllerSet(
            f"--controllers: unknown controller set(s) {', '.join(unknown) or '(none)'}; "
            f"known: {', '.join(sorted(SETS))}")
    return [SETS[n] for n in names]


def load_handlers(sets: Sequence[ControllerSet]) -> list[str]:
    """Import every set's handler modules (which registers their kopf handlers)."""
    loaded = []
    for cs in sets:
        for name in cs.handlers:
            importlib.import_module(name)
            loaded.append(name)
    return loaded


def webhooks(sets: Sequence[ControllerSet]) -> dict[str, Webhook]:
    out: dict[str, Webhook] = {}
    for cs in sets:
        for path, target in cs.webhooks.items():
            module, _, func = target.partition(":")
            out[path] = getattr(importlib.import_module(module), func)
    return out
