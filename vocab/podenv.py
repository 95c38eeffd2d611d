"""The environment contract of the in-pod programs: the variables the populators set on
the importer, upload-server and clone-target pods and those programs read, defined once.

A source's own variables (the registry's architecture...) are named beside its
declaration in ``vocab.sources``; those every source shares are here.

The names are upstream CDI's where it has them (``IMPORTER_SOURCE``, ``OWNER_UID``,
``FILESYSTEM_OVERHEAD``, ``PREALLOCATION``…) and rootdisk's own otherwise. The render
side is typed (:class:`TargetEnv`, :class:`ImportEnv`); the programs read the same names
(``importer.config``, ``importer.uploadserver.config``, ``importer.clonetarget``) and
validate the values, naming the variable when one is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

# -- every writer of a volume ----------------------------------------------------------
IMAGE_SIZE: Final = "IMPORTER_IMAGE_SIZE"
"""The claim's requested size (a quantity): the disk is made that large, less overhead."""
FILESYSTEM_OVERHEAD: Final = "FILESYSTEM_OVERHEAD"
OWNER_UID: Final = "OWNER_UID"
"""The target claim's uid (upstream reports progress under it)."""
PREALLOCATION: Final = "PREALLOCATION"
CONTENT_TYPE: Final = "IMPORTER_CONTENTTYPE"
DESTINATION: Final = "IMPORTER_DESTINATION"
POD_IP: Final = "POD_IP"
"""The pod's own address (the downward API's ``status.podIP``): servers bind to it."""

# -- the importer --------------------------------------------------------------------------
SOURCE: Final = "IMPORTER_SOURCE"
ENDPOINT: Final = "IMPORTER_ENDPOINT"
INSECURE_TLS: Final = "INSECURE_TLS"
CERT_DIR: Final = "IMPORTER_CERT_DIR"
CHECKSUM: Final = "IMPORTER_CHECKSUM"
EXTRA_HEADER_PREFIX: Final = "IMPORTER_EXTRA_HEADER_"
"""``IMPORTER_EXTRA_HEADER_<n>``: the source's extra headers, in order."""
ACCESS_KEY_ID: Final = "IMPORTER_ACCESS_KEY_ID"
SECRET_KEY: Final = "IMPORTER_SECRET_KEY"  # noqa: S105 - a variable's name
CREDENTIAL_KEYS: Final = ((ACCESS_KEY_ID, "accessKeyId"), (SECRET_KEY, "secretKey"))
"""Variable ← key of the source's Secret (upstream's key names); set from the Secret by
the kubelet (``valueFrom``), never written into the pod spec."""
RETRY_ATTEMPTS: Final = "IMPORTER_RETRY_ATTEMPTS"
RETRY_DELAY: Final = "IMPORTER_RETRY_DELAY"

# -- the upload server and the clone target -----------------------------------------------
UPLOAD_TLS_DIR: Final = "UPLOAD_TLS_DIR"
UPLOAD_CLIENT_NAME: Final = "UPLOAD_CLIENT_NAME"
UPLOAD_PORT: Final = "UPLOAD_PORT"
CLONER_TARGET: Final = "CLONER_TARGET"
CLONE_TLS_DIR: Final = "CLONE_TLS_DIR"
CLONE_PORT: Final = "CLONE_PORT"
CLONE_GROW_ONLY: Final = "CLONE_GROW_ONLY"
UPLOAD_SCRATCH_DIR: Final = "UPLOAD_SCRATCH_DIR"
UPLOAD_DEADLINE: Final = "DEADLINE"
"""When the upload server ends unless an upload is under way (RFC 3339; upstream's name)."""
CLONER_SOURCE: Final = "CLONER_SOURCE"
CLONE_TARGET: Final = "CLONE_TARGET"
"""The clone source's peer: the target pod's ``ip:port``."""
CLONE_SERVER_NAME: Final = "CLONE_SERVER_NAME"

# -- read by the programs only (rootdisk's: tests and benchmarks set them) ----------------
TERMINATION_LOG: Final = "IMPORTER_TERMINATION_LOG"
"""Where a program writes its termination message instead of :data:`TERMINATION_LOG_PATH`."""
METRICS_PORT: Final = "IMPORTER_METRICS_PORT"
SECRET_HEADERS_DIR: Final = "IMPORTER_SECRET_EXTRA_HEADERS_DIR"  # noqa: S105 - a variable's name
SCRATCH_DIR: Final = "IMPORTER_SCRATCH_DIR"
READ_TIMEOUT: Final = "IMPORTER_READ_TIMEOUT"
STALL_MIN_BYTES: Final = "IMPORTER_STALL_MIN_BYTES"
STALL_WINDOW: Final = "IMPORTER_STALL_WINDOW"
DEADLINE: Final = "IMPORTER_DEADLINE"

# -- the pod's layout, as the populators build it and the programs expect it --------------
TERMINATION_LOG_PATH: Final = "/dev/termination-log"
"""The container's ``terminationMessagePath``: the programs' result, read by the populator."""
DEFAULT_METRICS_PORT: Final = 8443
"""The progress metric's port (upstream's)."""
DEFAULT_UPLOAD_PORT: Final = 8443
"""The upload server's TLS port (upstream's)."""
DEFAULT_CLONE_PORT: Final = 8444
"""The clone target's TLS port (rootdisk's own)."""
SECRET_HEADERS_PATH: Final = "/extraheaders"  # noqa: S105 - a path
"""Where the Secrets of ``secretExtraHeaders`` are mounted, ``/extraheaders/<index>``."""


def _var(name: str, value: str) -> dict[str, str]:
    return {"name": name, "value": value}


def flag(value: bool) -> str:
    """A boolean as the programs read it."""
    return "true" if value else "false"


@dataclass(frozen=True, kw_only=True)
class TargetEnv:
    """What every program writing a volume is told about its target."""

    image_size: str
    filesystem_overhead: str
    owner_uid: str
    preallocation: bool = False

    def render(self) -> list[dict[str, str]]:
        return [_var(IMAGE_SIZE, self.image_size),
                _var(FILESYSTEM_OVERHEAD, self.filesystem_overhead),
                _var(OWNER_UID, self.owner_uid),
                _var(PREALLOCATION, flag(self.preallocation))]


@dataclass(frozen=True, kw_only=True)
class ImportEnv:
    """The importer's source and target (credentials come from the Secret, not here)."""

    target: TargetEnv
    source: str
    endpoint: str
    content_type: str
    insecure_tls: bool = False
    cert_dir: str = ""
    checksum: str = ""
    extra_headers: tuple[str, ...] = ()
    options: tuple[tuple[str, str], ...] = ()
    """The source's own variables (``vocab.sources.Option``), in declared order; empty
    values are left out."""

    def render(self) -> list[dict[str, str]]:
        env = [_var(SOURCE, self.source), _var(ENDPOINT, self.endpoint),
               _var(CONTENT_TYPE, self.content_type), *self.target.render(),
               _var(INSECURE_TLS, flag(self.insecure_tls))]
        if self.cert_dir:
            env.append(_var(CERT_DIR, self.cert_dir))
        if self.checksum:
            env.append(_var(CHECKSUM, self.checksum))
        env += [_var(name, value) for name, value in self.options if value]
        env += [_var(f"{EXTRA_HEADER_PREFIX}{i}", h) for i, h in enumerate(self.extra_headers)]
        return env
