"""The importer's errors: each carries a machine-readable ``reason`` and ``retryable``.

The tree::

    ImporterError                  (reason "ImportFailed")
    ├── ConfigError                bad configuration, names the field     (permanent)
    ├── NotFound                   404 / NoSuchKey                          (permanent)
    ├── Unauthorized               401 / 403 / AccessDenied                 (permanent)
    ├── ChecksumMismatch           bytes as fetched do not match            (permanent)
    ├── TooSmall                   image does not fit the volume            (permanent)
    ├── InvalidImage               unreadable, truncated, bomb, bad format  (permanent)
    ├── BackingFileRejected        backing file / external extents / data file (permanent)
    └── TransferError              network drop, timeout, 5xx               (retryable)

Only ``retryable`` failures are worth a pod restart; the controller turns the others into
a DataVolume ``Failed`` at once (upstream retries almost everything forever).
"""

from __future__ import annotations


class ImporterError(Exception):
    """Root of the importer's errors."""

    reason = "ImportFailed"
    retryable = False

    def __init__(self, message: str, *, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.cause = cause


class ConfigError(ImporterError):
    """The configuration is wrong; the message names the field."""

    reason = "InvalidConfig"


class NotFound(ImporterError):
    """The image is not at that URL."""

    reason = "NotFound"


class Unauthorized(ImporterError):
    """The source refused the credentials (or their absence)."""

    reason = "Unauthorized"


class ChecksumMismatch(ImporterError):
    """The bytes fetched do not hash to the expected value."""

    reason = "ChecksumMismatch"


class TooSmall(ImporterError):
    """The image's virtual size exceeds what the volume can hold."""

    reason = "TooSmall"


class InvalidImage(ImporterError):
    """The data is not a valid image of a supported format."""

    reason = "InvalidImage"


class BackingFileRejected(ImporterError):
    """The image refers to other files (backing file, external extent or data file)."""

    reason = "BackingFileRejected"


class TransferError(ImporterError):
    """A passing failure of the transfer: worth retrying."""

    reason = "TransferFailed"
    retryable = True


def from_reason(reason: str, message: str) -> ImporterError:
    """Rebuild an error reported by another process (the NBD plugin) from its reason."""
    kinds: list[type[ImporterError]] = [ImporterError]
    while kinds:
        kind = kinds.pop()
        if kind.reason == reason:
            return kind(message)
        kinds.extend(kind.__subclasses__())
    return ImporterError(message)
