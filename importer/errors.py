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
    ├── NotADiskImage              a web page or the like, not a disk       (permanent)
    ├── InvalidResponse            a server answer that breaks HTTP's rules (permanent)
    ├── TooManyRedirects           a redirect loop or chain over the limit  (permanent)
    ├── SourceChanged              ETag/Last-Modified/size changed mid-import (retryable:
    │                              the restarted pod starts again from zero)
    ├── Stalled                    fewer bytes than the minimum in a window (retryable)
    ├── DeadlineExceeded           the overall deadline passed              (permanent)
    ├── Interrupted                SIGTERM/SIGINT: stopped, cleaned up      (retryable)
    └── TransferError              network drop, timeout, 5xx               (retryable)

Only ``retryable`` failures are worth a pod restart; the controller turns the others into
a DataVolume ``Failed`` at once (upstream retries almost everything forever).
"""

from __future__ import annotations

from importer.redact import redact_text


class ImporterError(Exception):
    """Root of the importer's errors."""

    reason = "ImportFailed"
    retryable = False

    def __init__(self, message: str, *, cause: BaseException | None = None) -> None:
        message = redact_text(message)  # exception text quotes URLs, queries included
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


class NotADiskImage(ImporterError):
    """What came back is plainly not a disk (an HTML page for a wrong URL)."""

    reason = "NotADiskImage"


class InvalidResponse(ImporterError):
    """The server answered against the request (a Content-Range that is not the range
    asked for): its bytes cannot be trusted to be where they claim."""

    reason = "InvalidResponse"


class TooManyRedirects(ImporterError):
    """A redirect loop, or more redirects than the client follows."""

    reason = "TooManyRedirects"


class SourceChanged(ImporterError):
    """The object changed while it was being read (validators or size differ from the
    probe's). Retryable: a new attempt starts from zero on the new object."""

    reason = "SourceChanged"
    retryable = True


class Stalled(ImporterError):
    """Fewer than the minimum bytes arrived in the throughput window."""

    reason = "Stalled"
    retryable = True


class DeadlineExceeded(ImporterError):
    """The import's overall deadline passed."""

    reason = "DeadlineExceeded"


class Interrupted(ImporterError):
    """Stopped by a signal (kubelet stop, timeout, Ctrl-C); children stopped and the
    destination wiped. Retryable: nothing is wrong with the source."""

    reason = "Interrupted"
    retryable = True
