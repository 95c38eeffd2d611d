"""How the populators name what they make (pure): PVC', its pods and Secrets.

The API's strings (annotations, labels, the group) are in ``vocab.cdi``.
"""

from __future__ import annotations


def prime_name(target_uid: str) -> str:
    """PVC' of a target: ``prime-<target uid>`` (deterministic: a restarted operator finds
    the one it made)."""
    return f"prime-{target_uid}"


def importer_pod_name(prime: str) -> str:
    """The importer pod of PVC' ``prime``: ``importer-<PVC' name>`` as upstream."""
    return f"importer-{prime}"


def cloner_pod_name(prime: str) -> str:
    """The host-assisted clone pod of PVC' ``prime``."""
    return f"cloner-{prime}"


def clone_source_pod_name(target_uid: str) -> str:
    """The host-assisted clone's source pod, in the source namespace (upstream's name)."""
    return f"{target_uid}-source-pod"


def clone_secret_names(target_uid: str) -> tuple[str, str]:
    """(target side, source side) Secrets holding the clone's TLS material."""
    return f"clone-target-tls-{target_uid}", f"clone-source-tls-{target_uid}"
