"""The operator program (image ``rootdisk/operator``): ``python -m rootdisk.operator
--controllers SET[,SET…]`` runs the chosen controller sets in one kopf process.

Each set is a list of kopf wiring modules (``*.handlers``) registered in ``SETS``;
importing a module registers its handlers. One image, one program, each set deployed
on its own with its own RBAC.
"""

from __future__ import annotations

SETS: dict[str, tuple[str, ...]] = {
    # VM side: the VM controller and the VMI controller (KubeVirt's virt-controller).
    "vm": ("vm.controller.handlers", "vm.vmi.handlers"),
    # The node handler (KubeVirt's virt-handler), one per node: a DaemonSet.
    "handler": ("vm.handler.handlers",),
}
