"""The upload server's settings, from the pod's environment (pure).

Variables: ``UPLOAD_TLS_DIR`` (``tls.crt``, ``tls.key``, ``ca.crt``: the CA of the
proxy's client certificate; a mounted Secret, never argv), ``UPLOAD_CLIENT_NAME`` (the
common name the client certificate must carry), ``POD_IP`` / ``UPLOAD_PORT`` (where to
listen), ``UPLOAD_SCRATCH_DIR`` (the size-limited scratch volume), and the importer's
``IMPORTER_DESTINATION``, ``IMPORTER_IMAGE_SIZE``, ``FILESYSTEM_OVERHEAD``,
``IMPORTER_CONTENTTYPE``, ``PREALLOCATION``, ``IMPORTER_READ_TIMEOUT``,
``IMPORTER_TERMINATION_LOG``; ``DEADLINE`` (RFC 3339, as upstream's: when the server,
unless an upload is under way, ends so that its pod is made again with a fresh
certificate).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from importer.config import (
    TERMINATION_LOG,
    ImporterConfig,
    default_dest,
    read_env,
)
from importer.errors import ConfigError
from vocab import podenv, sources

DEFAULT_TLS_DIR = Path("/etc/cdi-upload")
DEFAULT_CLIENT_NAME = "cdi-uploadproxy"
DEFAULT_PORT = podenv.DEFAULT_UPLOAD_PORT


@dataclass(frozen=True)
class ServerConfig:
    importer: ImporterConfig
    tls_dir: Path
    client_name: str
    address: str
    port: int
    termination_log: Path | None
    deadline: dt.datetime | None = None


def from_env(env: Mapping[str, str]) -> ServerConfig:
    # The importer's own parser reads the shared variables (and names the field on error).
    shared = {k: v for k, v in env.items() if not k.startswith(podenv.EXTRA_HEADER_PREFIX)}
    shared[podenv.METRICS_PORT] = "0"
    base = read_env(shared, source=sources.UPLOAD)
    port_text = env.get(podenv.UPLOAD_PORT) or str(DEFAULT_PORT)
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigError(f"{podenv.UPLOAD_PORT}: {port_text!r} is not a port number")
    client = env.get(podenv.UPLOAD_CLIENT_NAME) or DEFAULT_CLIENT_NAME
    scratch = env.get(podenv.UPLOAD_SCRATCH_DIR) or ""
    termination = Path(env.get(podenv.TERMINATION_LOG) or str(TERMINATION_LOG))
    deadline = None
    stamp = env.get(podenv.UPLOAD_DEADLINE)
    if stamp:
        try:
            deadline = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError:
            raise ConfigError(f"{podenv.UPLOAD_DEADLINE}: {stamp!r} is not an RFC 3339 time"
                              ) from None
        if deadline.tzinfo is None:
            raise ConfigError(f"{podenv.UPLOAD_DEADLINE}: {stamp!r} has no time zone")
    importer = ImporterConfig(
        source=sources.UPLOAD,
        dest=Path(env[podenv.DESTINATION]) if env.get(podenv.DESTINATION)
        else default_dest(),
        image_size=base.image_size,
        content_type=base.content_type,
        filesystem_overhead=base.filesystem_overhead,
        preallocation=base.preallocation,
        termination_log=None,
        metrics_port=None,
        scratch_dir=Path(scratch) if scratch else None,
        read_timeout=base.read_timeout,
        retry_attempts=1,  # a request body cannot be asked for again
        stall_min_bytes=0,
    )
    return ServerConfig(importer=importer,
                        tls_dir=Path(env.get(podenv.UPLOAD_TLS_DIR) or str(DEFAULT_TLS_DIR)),
                        client_name=client,
                        address=env.get(podenv.POD_IP) or "127.0.0.1",
                        port=int(port_text), termination_log=termination,
                        deadline=deadline)
