"""Image volumes (Kubernetes' ``volumes[].image``, KEP-4639): an OCI image's files,
mounted read-only, as the kubelet mounts them from its container runtime's store.

localcluster has no container runtime, so the node keeps its own store: each image is
pulled once (``ociregistry``: python-dxf, every layer's digest checked) and unpacked
(tarfile's ``data`` filter) into ``<data dir>/kubelet/images/<key>/rootfs``, where the
key is the digest the reference resolves to and the platform; a temporary directory is
renamed into place when complete, under a lock, so pods asking for the same image at once
pull it once. ``pullPolicy`` is Kubernetes': ``Always`` resolves the reference each
time, ``IfNotPresent`` (the default, except for ``:latest`` or no tag) uses what the node
resolved before, ``Never`` only that.

Credentials are the pod's ``imagePullSecrets`` (``kubernetes.io/dockerconfigjson``, the
``auths`` entry of the registry's host); CAs are those in ``<data dir>/certs.d/<host[:
port]>/*.crt``, as containers-certs.d(5) lays them out. Secrets stay in memory.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from ociregistry.client import Access, Credentials, RegistryError, resolve_digest
from ociregistry.image import host_architecture, pull_and_unpack
from ociregistry.reference import ImageReference, parse_reference
from ociregistry.reference import ReferenceError as BadReference
from pki.bundle import open_bundle

logger = logging.getLogger(__name__)
PULL_TIMEOUT = 60.0


class PullError(Exception):
    """The image cannot be pulled; the message says why (never a credential)."""


@dataclass(frozen=True)
class PullSecret:
    """One ``auths`` entry of a dockerconfigjson Secret."""

    host: str
    username: str
    password: str

    def __repr__(self) -> str:
        return f"PullSecret(host={self.host!r}, username={self.username!r}, password=<hidden>)"


def parse_pull_secrets(secrets: Mapping[str, Mapping[str, str]],
                       names: list[str]) -> list[PullSecret]:
    """The ``auths`` of the named Secrets' ``.dockerconfigjson`` (others are skipped, as
    the kubelet skips a Secret it cannot use)."""
    out = []
    for name in names:
        raw = (secrets.get(name) or {}).get(".dockerconfigjson")
        if not raw:
            continue
        try:
            auths = json.loads(raw).get("auths") or {}
        except (ValueError, AttributeError):
            logger.warning("imagePullSecret %s: not dockerconfigjson", name)
            continue
        for host, entry in auths.items() if isinstance(auths, dict) else ():
            if not isinstance(entry, dict):
                continue
            user, password = entry.get("username"), entry.get("password")
            if not (user and password) and entry.get("auth"):
                try:
                    user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
                except ValueError:
                    continue
            if user and password:
                host = str(host).removeprefix("https://").removeprefix("http://").rstrip("/")
                out.append(PullSecret(host, str(user), str(password)))
    return out


def default_policy(reference: str) -> str:
    """Kubernetes' default ``pullPolicy``: Always for ``:latest`` or no tag, else
    IfNotPresent."""
    ref = reference.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    if "@" in reference:
        return "IfNotPresent"
    return "Always" if ":" not in last or last.endswith(":latest") else "IfNotPresent"


class ImageStore:
    """The node's unpacked images."""

    def __init__(self, data_dir: str) -> None:
        self.root = Path(os.path.realpath(data_dir), "kubelet", "images")
        self.certs_dir = Path(os.path.realpath(data_dir), "certs.d")
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.pulls = 0
        """Images pulled (unpacked) by this store: tests count them."""

    def mount(self, reference: str, *, policy: str | None,
              pull_secrets: list[PullSecret]) -> str:
        """The directory holding ``reference``'s files (pulled when needed)."""
        try:
            ref = parse_reference(reference.removeprefix("docker://"))
        except BadReference as err:
            raise PullError(f"image {reference!r}: {err}") from None
        policy = policy or default_policy(reference)
        if policy not in ("Always", "IfNotPresent", "Never"):
            raise PullError(f"pullPolicy {policy!r} is not Always, IfNotPresent or Never")
        arch = host_architecture()
        known = self._known(ref, arch)
        if policy == "Never" or (policy == "IfNotPresent" and known is not None):
            if known is None:
                raise PullError(f'image "{reference}" is not present with pull policy of'
                                ' Never')
            return str(known)
        with self._access(ref, pull_secrets) as access:
            try:
                digest = resolve_digest(ref, access)
            except RegistryError as err:
                raise PullError(f'pulling image "{reference}": {err}') from err
            key = hashlib.sha256(f"{digest}|{arch}".encode()).hexdigest()
            rootfs = self.root / key / "rootfs"
            with self._locked(key):
                if not rootfs.is_dir():
                    self._pull(ref, digest, access, rootfs)
            self._remember(ref, arch, key)
            return str(rootfs)

    def _pull(self, ref: ImageReference, digest: str, access: Access, rootfs: Path) -> None:
        work = Path(tempfile.mkdtemp(prefix=".pull-", dir=self.root))
        try:
            pinned = ImageReference(ref.host, ref.repository, None, digest)
            pull_and_unpack(pinned, access, str(work / "rootfs"))
            rootfs.parent.mkdir(exist_ok=True)
            os.rename(work / "rootfs", rootfs)
            self.pulls += 1
            logger.info("image %s (%s) pulled", ref, digest)
        except RegistryError as err:
            raise PullError(f'pulling image "{ref}": {err}') from err
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _ref_file(self, ref: ImageReference, arch: str) -> Path:
        return self.root / "refs" / hashlib.sha256(f"{ref}|{arch}".encode()).hexdigest()

    def _known(self, ref: ImageReference, arch: str) -> Path | None:
        try:
            key = self._ref_file(ref, arch).read_text().strip()
        except OSError:
            return None
        rootfs = self.root / key / "rootfs"
        return rootfs if key.isalnum() and rootfs.is_dir() else None

    def _remember(self, ref: ImageReference, arch: str, key: str) -> None:
        path = self._ref_file(ref, arch)
        path.parent.mkdir(exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(key)
        os.replace(tmp, path)

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        with open(self.root / f"{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # bounded by the pull it waits for
            yield

    @contextlib.contextmanager
    def _access(self, ref: ImageReference, secrets: list[PullSecret]) -> Iterator[Access]:
        creds = next((Credentials(s.username, s.password) for s in secrets
                      if s.host == ref.host), None)
        host_dir = self.certs_dir / ref.host
        # the host comes from a pod's spec: only a directory right under certs.d (a host
        # of ".." must not make the node trust the files beside certs.d)
        inside = host_dir.resolve().parent == self.certs_dir.resolve()
        cas = sorted(host_dir.glob("*.crt")) if inside and host_dir.is_dir() else []
        if not cas:
            yield Access(credentials=creds, timeout=PULL_TIMEOUT)
            return
        with open_bundle(ca.read_bytes() for ca in cas) as bundle:
            yield Access(credentials=creds, ca_file=bundle.name, timeout=PULL_TIMEOUT)
