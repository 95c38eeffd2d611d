"""What a request's impersonation headers ask for, as kube-apiserver reads them.

``Impersonate-User`` names who to act as; ``Impersonate-Group`` (repeatable),
``Impersonate-Uid`` and ``Impersonate-Extra-<key>`` only add to it. Upstream refuses
them without a user (``staging/src/k8s.io/apiserver/pkg/endpoints/filters/impersonation/``):
400 BadRequest, before anything is authorized. Its default filter since 1.36
(ConstrainedImpersonation, ``constrained_impersonation.go``: processImpersonationHeaders)
words it ``requested &user.DefaultInfo{...} without impersonating a user name``, the
wanted user rendered with Go's ``%#v``; the legacy filter (``impersonation.go``,
buildImpersonationRequests) says ``requested [...] without impersonating a user``. The
answer is the same 400 either way.

Pure: :func:`wanted_user` takes the header pairs and raises the 400 itself.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import bad_request, go_quote

USER_HEADER = "impersonate-user"
UID_HEADER = "impersonate-uid"
GROUP_HEADER = "impersonate-group"
EXTRA_PREFIX = "impersonate-extra-"
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


@dataclass(frozen=True)
class WantedUser:
    """The user a request asks to act as, exactly as its headers say it."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


def _extra_key(encoded: str) -> str:
    """upstream's unescapeExtraKey: %-decoded, or kept as sent when malformed."""
    if _BAD_ESCAPE.search(encoded):
        return encoded
    return urllib.parse.unquote(encoded, errors="surrogateescape")


def _go_strings(values: Iterable[str] | None) -> str:
    """Go's ``%#v`` of a []string (``[]string(nil)`` when it is nil)."""
    if values is None:
        return "[]string(nil)"
    return "[]string{" + ", ".join(go_quote(v) for v in values) + "}"


def go_repr(wanted: WantedUser) -> str:
    """Go's ``%#v`` of the *user.DefaultInfo the headers make (map keys sorted, as fmt
    prints them)."""
    extra = "map[string][]string(nil)" if not wanted.extra else (
        "map[string][]string{" + ", ".join(
            f"{go_quote(k)}:{_go_strings(v)}" for k, v in sorted(wanted.extra)) + "}")
    return (f"&user.DefaultInfo{{Name:{go_quote(wanted.name)}, UID:{go_quote(wanted.uid)}, "
            f"Groups:{_go_strings(wanted.groups or None)}, Extra:{extra}}}")


def wanted_user(headers: Iterable[tuple[str, str]]) -> WantedUser | None:
    """The user the impersonation headers ask for; None when they ask for nothing.
    400 when they name a UID, groups or extras but no user (an empty value is no
    user, as upstream's ``headers.Get``)."""
    name = uid = None
    groups: list[str] = []
    extra: dict[str, list[str]] = {}
    asked = False
    for header, value in headers:
        key = header.lower()
        if key == USER_HEADER:
            name = value if name is None else name
        elif key == UID_HEADER:
            uid = value if uid is None else uid
        elif key == GROUP_HEADER:
            groups.append(value)
            asked = True
        elif key.startswith(EXTRA_PREFIX):
            extra.setdefault(_extra_key(key[len(EXTRA_PREFIX):]), []).append(value)
            asked = True
    wanted = WantedUser(name or "", uid or "", tuple(groups),
                        tuple((k, tuple(v)) for k, v in extra.items()))
    if not wanted.name:
        if asked or wanted.uid:
            raise bad_request(f"requested {go_repr(wanted)} without impersonating a user name")
        return None
    return wanted
