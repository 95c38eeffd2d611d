"""Errors of the embedded API server, each one a Kubernetes ``Status`` waiting to be sent.

Clients (kopf, the ``kubernetes`` package, kubectl) branch on ``Status.reason`` and
``Status.code``, so every failure the server can report is an :class:`APIError` that knows
its HTTP code, its reason and the ``details`` block; handlers never build Status bodies by
hand.

Tree::

    APIServerError            root of everything raised by localcluster.apiserver
    └── APIError              carries a Status (code, reason, message, details)

The helpers below (``not_found``, ``conflict``, ``invalid`` ...) produce the messages in the
same wording as kube-apiserver, because users read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class APIServerError(Exception):
    """Root of the errors raised by the embedded API server."""


@dataclass(frozen=True)
class Cause:
    """One ``details.causes[]`` entry: what was wrong and where."""

    reason: str
    message: str
    field: str = ""

    def to_dict(self) -> dict[str, str]:
        """As Go's StatusCause serializes: empty members left out (omitempty)."""
        out = {"reason": self.reason, "message": self.message, "field": self.field}
        return {k: v for k, v in out.items() if v}


@dataclass
class APIError(APIServerError):
    """A failed request, rendered as a ``Status`` object."""

    code: int
    reason: str
    message: str
    name: str = ""
    group: str = ""
    kind: str = ""
    causes: list[Cause] = field(default_factory=list)
    retry_after: int = 0
    status: str = "Failure"  # a webhook's denial may name another

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message

    def to_status(self) -> dict[str, Any]:
        details: dict[str, Any] = {}
        if self.name:
            details["name"] = self.name
        if self.group:
            details["group"] = self.group
        if self.kind:
            details["kind"] = self.kind
        if self.causes:
            details["causes"] = [c.to_dict() for c in self.causes]
        if self.retry_after:
            details["retryAfterSeconds"] = self.retry_after
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": self.status,
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if details:
            status["details"] = details
        return status


def required(path: str, detail: str = "") -> Cause:
    """``path: Required value`` (field.Required), with upstream's detail if any."""
    return Cause("FieldValueRequired", "Required value" + (f": {detail}" if detail else ""),
                 path)


def go_quote(text: str) -> str:
    """Go's ``%q`` of a string (strconv.Quote)."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in "\a\b\f\n\r\t\v":
            out.append("\\" + "abfnrtv"["\a\b\f\n\r\t\v".index(ch)])
        elif ch.isprintable():
            out.append(ch)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def not_found(*, resource: str, group: str, name: str) -> APIError:
    return APIError(404, "NotFound", f'{_qualified(resource, group)} "{name}" not found',
                    name=name, group=group, kind=resource)


def already_exists(*, resource: str, group: str, name: str) -> APIError:
    return APIError(409, "AlreadyExists",
                    f'{_qualified(resource, group)} "{name}" already exists',
                    name=name, group=group, kind=resource)


def conflict(*, resource: str, group: str, name: str, why: str) -> APIError:
    return APIError(409, "Conflict",
                    f'Operation cannot be fulfilled on {_qualified(resource, group)} '
                    f'"{name}": {why}', name=name, group=group, kind=resource)


STALE = ("the object has been modified; please apply your changes to the latest version and "
         "try again")


def invalid(*, kind: str, group: str, name: str, causes: list[Cause]) -> APIError:
    """422 Invalid, message ``Kind "name" is invalid: field: msg, field: msg``."""
    parts = [f"{c.field}: {c.message}" if c.field else c.message for c in causes]
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    qualified = f"{kind}.{group}" if group else kind  # as upstream: Deployment.apps
    return APIError(422, "Invalid", f'{qualified} "{name}" is invalid: {joined}',
                    name=name, group=group, kind=kind, causes=causes)


def bad_request(message: str) -> APIError:
    return APIError(400, "BadRequest", message)


def forbidden(message: str, *, resource: str = "", group: str = "", name: str = "") -> APIError:
    return APIError(403, "Forbidden", message, name=name, group=group, kind=resource)


def unauthorized() -> APIError:
    return APIError(401, "Unauthorized", "Unauthorized")


def gone(message: str) -> APIError:
    return APIError(410, "Expired", message)


def method_not_allowed(message: str) -> APIError:
    return APIError(405, "MethodNotAllowed", message)


def too_large(limit: int) -> APIError:
    return APIError(413, "RequestEntityTooLarge",
                    f"Request entity too large: limit is {limit}")


def unsupported_media_type(content_type: str) -> APIError:
    return APIError(415, "UnsupportedMediaType",
                    f'the body of the request was in an unknown format - accepted media '
                    f'types include: application/json, application/merge-patch+json, '
                    f'application/json-patch+json, application/strategic-merge-patch+json '
                    f'(got "{content_type}")')


def internal(message: str) -> APIError:
    return APIError(500, "InternalError", message)
