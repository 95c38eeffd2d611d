"""The claim and StorageClass conventions the scheduler and the provisioner share.

The kubelet's scheduler marks a WaitForFirstConsumer claim with the node it chose
(``volume.kubernetes.io/selected-node``), and the provisioner waits for that mark; both
need to know which class a claim gets when it names none (the one annotated
``storageclass.kubernetes.io/is-default-class: "true"``). Kept here so neither side
imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SELECTED_NODE = "volume.kubernetes.io/selected-node"
DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"

Obj = Mapping[str, Any]


def claim_class_name(claim: Obj, classes: Mapping[str, Obj]) -> str | None:
    """The claim's class; a claim that names none gets the default class."""
    name = (claim.get("spec") or {}).get("storageClassName")
    if name is not None:
        return str(name)
    for cname, sc in sorted(classes.items()):
        if ((sc.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_CLASS) == "true":
            return cname
    return None
