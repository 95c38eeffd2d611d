"""Which code a running embedded cluster was started from.

The embedded cluster runs rootdisk's programs from this checkout: its operators and its
API server from what the checkout held when ``rootdisk up`` started, every pod from what
it holds when the pod starts. Once the checkout changes (a pull, an edit), a cluster that
keeps running mixes the two: an old operator creating pods that run new code. So
``rootdisk up`` records a fingerprint of the code it starts from in its data dir, and
``make demo`` restarts a running cluster whose fingerprint is not the checkout's.

The fingerprint covers what runs in the cluster (the packages and the manifests), not
the tests, the docs or Python's byte-code caches.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

PACKAGES = ("vocab", "sizes", "pki", "ociregistry", "kubeclient", "apiservice", "cdi",
            "importer", "vm", "populators", "localcluster", "rootdisk")
"""The project's packages (pyproject.toml's), each a directory of the checkout."""
SUFFIXES = frozenset({".py", ".yaml", ".yml", ".json"})
FILE = "code-fingerprint"
"""Its name in the data dir."""
MAX_BYTES = 64 * 2**20
"""What the fingerprint reads at most (the checkout holds ~3 MiB): a bound, not a limit
to reach."""


def checkout() -> Path:
    """The directory holding the project's packages (the checkout, or site-packages)."""
    return Path(__file__).resolve().parent.parent


def fingerprint(root: Path, manifests: Path | None = None) -> str:
    """SHA-256 over the name and the content of every source file of the packages under
    ``root`` and of ``manifests`` (default: ``root/manifests``), in a fixed order."""
    digest = hashlib.sha256()
    read = 0
    trees = [root / name for name in PACKAGES] + [manifests or root / "manifests"]
    for tree in trees:
        if not tree.is_dir():
            continue
        for path in sorted(tree.rglob("*")):
            if path.suffix not in SUFFIXES or "__pycache__" in path.parts or \
                    not path.is_file():
                continue
            data = path.read_bytes()
            read += len(data)
            if read > MAX_BYTES:
                raise ValueError(f"{root}: more than {MAX_BYTES} bytes of sources")
            name = f"{tree.name}/{path.relative_to(tree).as_posix()}"
            digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()


def record(data_dir: str, value: str) -> None:
    """Write ``value`` as the data dir's fingerprint (whole or not at all)."""
    path = os.path.join(data_dir, FILE)
    part = f"{path}.{os.getpid()}"
    with open(os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
        fh.write(value + "\n")
    os.replace(part, path)


def recorded(data_dir: str) -> str | None:
    """The data dir's fingerprint; None when there is none (a cluster started before
    fingerprints were recorded, or never started)."""
    try:
        with open(os.path.join(data_dir, FILE)) as fh:
            return fh.read(256).strip() or None
    except FileNotFoundError:
        return None


def runs_other_code(data_dir: str) -> bool | None:
    """Whether the cluster of ``data_dir`` was started from other code than this
    checkout's; None when it recorded none (not started by ``rootdisk up``, or by one
    from before fingerprints). The checkout is read only when there is a record."""
    found = recorded(data_dir)
    return None if found is None else found != fingerprint(checkout())
