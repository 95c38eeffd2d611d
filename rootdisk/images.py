"""rootdisk's container images and the programs they stand for on localcluster.

localcluster has no container runtime and knows no image of its own: ``rootdisk up``
hands it this table, so a pod whose image is ``rootdisk/importer`` (under any registry
prefix and tag) runs ``python -m importer`` from this checkout. Kept here, with the
programs, so the embedded cluster stays free of rootdisk's names.
"""

from __future__ import annotations

from collections.abc import Mapping

IMAGES: Mapping[str, tuple[str, ...]] = {
    "rootdisk/importer": ("python", "-m", "importer"),
    "rootdisk/cloner": ("python", "-m", "importer.cloner"),
    "rootdisk/clone-target": ("python", "-m", "importer.clonetarget"),
    "rootdisk/uploadserver": ("python", "-m", "importer.uploadserver"),
    "rootdisk/launcher": ("python", "-m", "vm.launcher"),
    "rootdisk/operator": ("python", "-m", "rootdisk.operator"),
}
"""Image name (``rootdisk/<program>``) → entry point, as localcluster's Options take it."""
