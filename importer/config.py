"""The importer's configuration, read once into a frozen value.

Two front doors build the same ``ImporterConfig``: ``from_env`` reads upstream CDI's
environment variables (so an importer pod spec written for CDI works unchanged), and the
``rootdisk import`` command builds it from flags. Every validation error names the
variable (or flag) and what is wrong with it. Secrets are kept out of ``repr``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from pathlib import Path
from urllib.parse import urlsplit

from importer.checksum import Checksum, parse_checksum
from importer.errors import ConfigError
from importer.watchdog import DEFAULT_MIN_BYTES, DEFAULT_WINDOW
from sizes import DEFAULT_OVERHEAD, parse_bytes, parse_overhead
from vocab import podenv, sources

FILESYSTEM_DEST = Path("/data/disk.img")
BLOCK_DEST = Path("/dev/cdi-block-volume")
TERMINATION_LOG = Path(podenv.TERMINATION_LOG_PATH)
METRICS_PORT = podenv.DEFAULT_METRICS_PORT
SECRET_HEADERS_DIR = Path(podenv.SECRET_HEADERS_PATH)
"""Where upstream's pod mounts the Secrets of ``secretExtraHeaders`` (one per directory,
``/extraheaders/<index>``); ``IMPORTER_SECRET_EXTRA_HEADERS_DIR`` moves it (rootdisk)."""
MAX_HEADER_BYTES = 8 * 1024
"""Largest header file read from a Secret (a server refuses longer header lines anyway)."""


class ContentType(StrEnum):
    KUBEVIRT = "kubevirt"
    ARCHIVE = "archive"


KINDS = (*sources.IMPORTED, sources.UPLOAD)
"""What ``source`` may be: a kind declared in ``vocab.sources`` (its reader is
``importer/sources/<kind>.py``), or ``upload`` (the bytes arrive in a request to the
upload server, ``importer.uploadserver``)."""


@dataclass(frozen=True)
class ImporterConfig:
    source: str
    """A kind of :data:`KINDS`."""
    endpoint: str = ""
    """The image URL (http/https), or the S3 object (s3://bucket/key, or path-style
    http(s)://host/bucket/key as upstream takes it)."""
    dest: Path = FILESYSTEM_DEST
    image_size: int | None = None
    """The volume's requested size in bytes (the PVC request); None: as large as the image."""
    content_type: ContentType = ContentType.KUBEVIRT
    checksum: Checksum | None = None
    cert_dir: Path | None = None
    insecure_tls: bool = False
    access_key_id: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    extra_headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    options: tuple[tuple[str, str], ...] = ()
    """The source's own settings (variable, value): the variables its declaration in
    ``vocab.sources`` lists (the registry's architecture, the S3 endpoint...); its reader
    reads and checks them."""
    filesystem_overhead: Fraction = DEFAULT_OVERHEAD
    preallocation: bool = False
    owner_uid: str = ""
    termination_log: Path | None = TERMINATION_LOG
    metrics_port: int | None = None
    metrics_addr: str = "0.0.0.0"
    """Where the metrics server listens: the pod's own IP when the pod knows it (pods on
    a shared host network, as on localcluster, would collide on 0.0.0.0:8443)."""
    scratch_dir: Path | None = None
    """Where a compressed convertible image is decompressed before conversion.
    None: beside the destination file (Filesystem), or the temp dir (Block)."""
    partial_file: bool = False
    """Write a file destination as ``.NAME.partial`` beside it and rename it on success
    (the CLI: a killed import leaves nothing under the real name). Pods write the
    volume's disk.img in place: their exit status and termination message are the record."""
    stall_min_bytes: int = DEFAULT_MIN_BYTES
    """Fail ``Stalled`` when fewer bytes than this arrive in ``stall_window`` seconds."""
    stall_window: float = DEFAULT_WINDOW
    deadline: float | None = None
    """Seconds the whole import may take (None: no overall deadline)."""
    read_timeout: float = 60.0
    """Seconds without a byte before a read is given up (and retried, resuming)."""
    retry_attempts: int = 6
    """Tries of one read (the first included) before a transfer error is final."""
    retry_delay: float = 1.0
    """First backoff delay in seconds; doubles per try up to 30 s."""

    def option(self, variable: str) -> str | None:
        """The value of one of the source's own settings (None: not set)."""
        return dict(self.options).get(variable) or None

    def __post_init__(self) -> None:
        if self.source not in KINDS:
            raise ConfigError(f"{podenv.SOURCE}: unknown source {self.source!r}"
                              f" (supported: {', '.join(KINDS)})")
        if self.source in sources.URL_SCHEMES:
            check_url(self.endpoint, self.source, field_name=podenv.ENDPOINT)
        if self.source in sources.DECLARATIONS:
            from importer.sources import check_config  # late: the readers import this module
            check_config(self)
        if self.retry_attempts < 1:
            raise ConfigError("retry_attempts: must be at least 1")
        if self.read_timeout <= 0:
            raise ConfigError(f"{podenv.READ_TIMEOUT}: must be positive, got {self.read_timeout}")
        if self.stall_window <= 0:
            raise ConfigError(f"{podenv.STALL_WINDOW}: must be positive, got {self.stall_window}")
        if self.stall_min_bytes < 0:
            raise ConfigError(f"{podenv.STALL_MIN_BYTES}: must not be negative")
        if self.deadline is not None and self.deadline <= 0:
            raise ConfigError(f"{podenv.DEADLINE}: must be positive, got {self.deadline}")


def check_url(url: str, source: str, *, field_name: str) -> None:
    """What every URL source asks of its URL: present, no control character, one of the
    source's schemes (``vocab.sources``); then the reader's own ``check_url`` (the
    registry's references, S3's bucket and key), else a host."""
    if not url:
        raise ConfigError(f"{field_name}: an image URL is required")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        # A raw CR/LF would forge log lines and headers; URLs escape them as %0D%0A.
        raise ConfigError(f"{field_name}: the URL holds a control character (CR, LF, ...);"
                          " escape it with %XX")
    parts = urlsplit(url)
    allowed = sources.URL_SCHEMES[source]
    if parts.scheme not in allowed:
        raise ConfigError(
            f"{field_name}: scheme {parts.scheme!r} is not allowed for a {source} source"
            f" (allowed: {', '.join(allowed)})"
        )
    from importer.sources import url_check  # late: the readers import this module
    own = url_check(source)
    if own is not None:
        own(url, field_name=field_name)
    else:
        require_host(url, field_name=field_name)


def require_host(url: str, *, field_name: str) -> None:
    if not urlsplit(url).netloc:
        raise ConfigError(f"{field_name}: {url!r} has no host")


def from_env(env: Mapping[str, str] = os.environ) -> ImporterConfig:
    """Build the config from upstream CDI's importer environment variables."""
    source = env.get(podenv.SOURCE, sources.HTTP)
    if source not in KINDS:
        raise ConfigError(
            f"{podenv.SOURCE}: unknown source {source!r}"
            f" (supported: {', '.join(KINDS)})"
        )
    if source == sources.UPLOAD:
        raise ConfigError(f"{podenv.SOURCE}: upload is received by the upload server"
                          " (python -m importer.uploadserver), not imported")
    return read_env(env, source=source)


def read_env(env: Mapping[str, str], *, source: str) -> ImporterConfig:
    """The config of ``source`` from the variables (the upload server's too: it reads the
    shared ones here, asking for ``upload``)."""
    declared = sources.DECLARATIONS.get(source)
    dest = env.get(podenv.DESTINATION)
    return ImporterConfig(
        source=source,
        endpoint=env.get(podenv.ENDPOINT, ""),
        dest=Path(dest) if dest else default_dest(),
        image_size=_size(env, podenv.IMAGE_SIZE),
        content_type=_content_type(env.get(podenv.CONTENT_TYPE, "kubevirt"),
                                   podenv.CONTENT_TYPE),
        checksum=_checksum(env.get(podenv.CHECKSUM, ""), podenv.CHECKSUM),
        cert_dir=existing_dir(env.get(podenv.CERT_DIR, ""), podenv.CERT_DIR),
        insecure_tls=_bool(env, podenv.INSECURE_TLS),
        access_key_id=env.get(podenv.ACCESS_KEY_ID) or None,
        secret_key=env.get(podenv.SECRET_KEY) or None,
        extra_headers=_env_headers(env) + secret_headers(
            Path(env.get(podenv.SECRET_HEADERS_DIR) or SECRET_HEADERS_DIR)),
        options=tuple((o.variable, env[o.variable])
                      for o in (declared.options if declared else ())
                      if o.variable and env.get(o.variable)),
        filesystem_overhead=_overhead(env.get(podenv.FILESYSTEM_OVERHEAD, ""),
                                      podenv.FILESYSTEM_OVERHEAD),
        preallocation=_bool(env, podenv.PREALLOCATION),
        owner_uid=env.get(podenv.OWNER_UID, ""),
        termination_log=Path(env.get(podenv.TERMINATION_LOG, str(TERMINATION_LOG))),
        metrics_port=_port(env.get(podenv.METRICS_PORT, str(METRICS_PORT))),
        metrics_addr=env.get(podenv.POD_IP) or "0.0.0.0",
        scratch_dir=Path(env[podenv.SCRATCH_DIR]) if env.get(podenv.SCRATCH_DIR) else None,
        retry_attempts=_int(env, podenv.RETRY_ATTEMPTS, 6),
        retry_delay=_float(env, podenv.RETRY_DELAY, 1.0),
        read_timeout=_float(env, podenv.READ_TIMEOUT, 60.0),
        stall_min_bytes=parse_byte_count(env.get(podenv.STALL_MIN_BYTES) or "1Mi",
                                         field_name=podenv.STALL_MIN_BYTES),
        stall_window=_float(env, podenv.STALL_WINDOW, DEFAULT_WINDOW),
        deadline=_float(env, podenv.DEADLINE, 0.0) or None,
    )



def default_dest() -> Path:
    """The block device when the pod has one, else the Filesystem volume's disk.img."""
    return BLOCK_DEST if BLOCK_DEST.exists() else FILESYSTEM_DEST


def parse_header(text: str, *, field_name: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip() or any(c in name for c in " \t\r\n"):
        raise ConfigError(f"{field_name}: {text.split(':')[0]!r}... is not a 'Name: value' header")
    if "\n" in value or "\r" in value:
        raise ConfigError(f"{field_name}: header {name!r} has a line break in its value")
    return name.strip(), value.strip()


def secret_headers(root: Path) -> tuple[tuple[str, str], ...]:
    """The headers of ``secretExtraHeaders``: every file under ``root`` holds one
    ``Name: value`` header (each key of each mounted Secret). Entries whose name starts
    with a dot are skipped (the kubelet's ``..data`` link and its timestamped directory;
    the keys are links through them). Errors name the file, never its content."""
    if not root.is_dir():
        return ()
    found: list[tuple[str, str]] = []
    for top, dirs, files in os.walk(root):
        dirs[:] = sorted((d for d in dirs if not d.startswith(".")), key=lambda d: (len(d), d))
        for name in sorted(f for f in files if not f.startswith(".")):
            path = Path(top, name)
            where = f"secretExtraHeaders ({path})"
            try:
                with path.open("rb") as fh:
                    raw = fh.read(MAX_HEADER_BYTES + 1)
            except OSError as err:
                raise ConfigError(f"{where}: cannot be read: {err.strerror}") from None
            if len(raw) > MAX_HEADER_BYTES:
                raise ConfigError(f"{where}: longer than {MAX_HEADER_BYTES} bytes")
            try:
                text = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                raise ConfigError(f"{where}: not UTF-8 text") from None
            header_name, sep, value = text.partition(":")
            if not sep or not header_name.strip() or any(
                    c in header_name for c in " \t\r\n"):
                raise ConfigError(f"{where}: not a 'Name: value' header")
            if any(c in value for c in "\r\n\0"):
                raise ConfigError(f"{where}: header {header_name!r} has a line break or NUL"
                                  " in its value")
            found.append((header_name, value.strip()))
    return tuple(found)


def parse_size(text: str, *, field_name: str) -> int:
    try:
        size = parse_bytes(text)
    except ValueError as err:
        raise ConfigError(f"{field_name}: {err}") from None
    if size <= 0:
        raise ConfigError(f"{field_name}: size must be positive, got {text!r}")
    return size


def parse_byte_count(text: str, *, field_name: str) -> int:
    """A byte count where 0 is allowed (0 turns a minimum off)."""
    try:
        return parse_bytes(text)
    except ValueError as err:
        raise ConfigError(f"{field_name}: {err}") from None


def _env_headers(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    keys = sorted(
        (k for k in env if k.startswith(podenv.EXTRA_HEADER_PREFIX)),
        key=lambda k: (len(k), k),
    )
    return tuple(parse_header(env[k], field_name=k) for k in keys)


def _size(env: Mapping[str, str], name: str) -> int | None:
    text = env.get(name, "")
    return parse_size(text, field_name=name) if text else None


def _content_type(text: str, name: str) -> ContentType:
    try:
        return ContentType(text or "kubevirt")
    except ValueError:
        raise ConfigError(f"{name}: {text!r} is not 'kubevirt' or 'archive'") from None


def _checksum(text: str, name: str) -> Checksum | None:
    if not text:
        return None
    try:
        return parse_checksum(text, field=name)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def existing_dir(text: str, name: str) -> Path | None:
    if not text:
        return None
    path = Path(text)
    if not path.is_dir():
        raise ConfigError(f"{name}: {text!r} is not a directory")
    return path


def _overhead(text: str, name: str) -> Fraction:
    if not text:
        return DEFAULT_OVERHEAD
    try:
        return parse_overhead(text)
    except ValueError as err:
        raise ConfigError(f"{name}: {err}") from None


def _bool(env: Mapping[str, str], name: str) -> bool:
    text = env.get(name, "").strip().lower()
    if text in ("", "false", "0", "no"):
        return False
    if text in ("true", "1", "yes"):
        return True
    raise ConfigError(f"{name}: {text!r} is not a boolean (true or false)")


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name, "")
    if not text:
        return default
    if not text.isdigit():
        raise ConfigError(f"{name}: {text!r} is not a whole number")
    return int(text)


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name, "")
    try:
        return float(text) if text else default
    except ValueError:
        raise ConfigError(f"{name}: {text!r} is not a number") from None


def _port(text: str) -> int | None:
    if text in ("", "0"):
        return None
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ConfigError(f"{podenv.METRICS_PORT}: {text!r} is not a port number")
    return int(text)
