"""The API's failures as one exception tree (pure).

:class:`KubeError` is the root: ``status`` is the HTTP code (0 when no answer came),
``reason`` its phrase, ``body`` the Status object the server sent. The subclasses name the
answers the operators act on, so a caller writes ``except NotFound`` instead of comparing
codes; :func:`api_error` picks the class for an answer. Every subclass keeps ``status``,
so ``err.status == 409`` still reads as before.

    KubeError
    ├── BadRequest (400)
    ├── Unauthorized (401)
    ├── Forbidden (403)
    ├── NotFound (404)
    ├── Conflict (409: the object changed, or a precondition failed)
    │   └── AlreadyExists (409 with reason AlreadyExists: a create found the name taken)
    ├── Gone (410: a watch's resourceVersion is too old)
    └── Invalid (422: the object breaks the schema or a rule)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class KubeError(Exception):
    """An API call failed: ``status`` is the HTTP code (0 when no answer came), ``reason``
    its phrase, ``body`` the Status object when the server sent one."""

    def __init__(self, status: int, reason: str, body: Any = None) -> None:
        self.status = status
        self.reason = reason
        self.body = body
        super().__init__(f"{status} {reason}: {self.message}" if body else
                         f"{status} {reason}")

    @property
    def message(self) -> str:
        """The Status message the API server gave, else the reason."""
        if isinstance(self.body, Mapping):
            return str(self.body.get("message") or self.reason)
        return self.reason


class BadRequest(KubeError):
    """400."""


class Unauthorized(KubeError):
    """401: no identity the server accepts."""


class Forbidden(KubeError):
    """403: the identity may not do this."""


class NotFound(KubeError):
    """404: no such object (or the kind is not served)."""


class Conflict(KubeError):
    """409: the object changed since it was read, or a UID precondition failed."""


class AlreadyExists(Conflict):
    """409 AlreadyExists: a create found an object of that name."""


class Gone(KubeError):
    """410: the resourceVersion a watch started from is too old."""


class Invalid(KubeError):
    """422: the object was refused by the schema or a validation rule."""


_BY_STATUS: dict[int, type[KubeError]] = {
    400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict,
    410: Gone, 422: Invalid,
}


def api_error(status: int, reason: str, body: Any = None) -> KubeError:
    """The exception for an answer with this code, phrase and Status body."""
    if status == 409 and isinstance(body, Mapping) and body.get("reason") == "AlreadyExists":
        return AlreadyExists(status, reason, body)
    return _BY_STATUS.get(status, KubeError)(status, reason, body)


def is_not_found(err: BaseException) -> bool:
    return isinstance(err, KubeError) and err.status == 404


def is_conflict(err: BaseException) -> bool:
    return isinstance(err, KubeError) and err.status == 409


def is_stale(err: BaseException) -> bool:
    """A write a level-triggered controller lost to a newer state of the object: a 409
    (someone wrote it since this pass read it, or it already exists) or a 404 (it was
    deleted since). The watch brings that newer state and the next pass acts on it, so
    this is not worth a warning."""
    return is_conflict(err) or is_not_found(err)
