"""What a list or watch request asks for, checked as kube-apiserver checks ListOptions.

A paged list (``limit``/``continue``) is one consistent snapshot: every page is read at
the resourceVersion of the first one, which the continue token carries; once the history
no longer reaches back that far the token has expired (410). ``resourceVersionMatch``
says how ``resourceVersion`` is meant: ``Exact`` (the list as it was at that version) or
``NotOlderThan`` (now, provided now is not older). ``sendInitialEvents=true`` turns a
watch into a "watch list" (client-go informers since 1.27): the current objects as ADDED
events, then a BOOKMARK annotated ``k8s.io/initial-events-end``, then the changes.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import APIError, bad_request

EXACT, NOT_OLDER_THAN = "Exact", "NotOlderThan"
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


@dataclass(frozen=True)
class ListPlan:
    """``read_rv``: the version to read at (None: now); ``start``: list after this key."""

    read_rv: int | None
    start: tuple[str, str] | None
    limit: int
    min_rv: int | None = None  # NotOlderThan: the store must have reached it


@dataclass(frozen=True)
class WatchPlan:
    send_initial_events: bool
    min_rv: int | None = None


def encode_continue(rv: int, ns: str, name: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"rv": rv, "start": [ns, name]}).encode()
                                    ).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        ns, name = data["start"]
        rv = int(data["rv"])
        if rv < 1:
            raise ValueError(rv)
        return rv, (str(ns), str(name))
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise bad_request("continue: Invalid value: the continue token is not valid") from None


def _rv(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise bad_request(f'resourceVersion: Invalid value: "{text}": must be an integer') \
            from None
    if value < 0:
        raise bad_request(f'resourceVersion: Invalid value: "{text}": must be non-negative')
    return value


def _match(query: Mapping[str, str]) -> str:
    match = query.get("resourceVersionMatch", "")
    if match not in ("", EXACT, NOT_OLDER_THAN):
        raise bad_request(f'resourceVersionMatch: Unsupported value: "{match}": supported '
                          f'values: "{EXACT}", "{NOT_OLDER_THAN}"')
    return match


def too_large(wanted: int, current: int) -> APIError:
    """A version the store has not reached: upstream answers 504 and asks to retry."""
    return APIError(504, "Timeout", f"Too large resource version: {wanted}, current: "
                                    f"{current}", retry_after=1)


def list_plan(query: Mapping[str, str], *, limit: int) -> ListPlan:
    token = query.get("continue") or ""
    rv_text = query.get("resourceVersion", "")
    match = _match(query)
    if token:
        if match:
            raise bad_request("resourceVersionMatch: Forbidden: resourceVersionMatch is "
                              "forbidden when continue is provided")
        if rv_text not in ("", "0"):
            raise bad_request("resourceVersion: Forbidden: specifying resource version is "
                              "not allowed when using continue")
        rv, start = decode_continue(token)
        return ListPlan(read_rv=rv, start=start, limit=limit)
    if match and not rv_text:
        raise bad_request("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden "
                          "unless resourceVersion is provided")
    if not rv_text:
        return ListPlan(read_rv=None, start=None, limit=limit)
    rv = _rv(rv_text)
    if match == EXACT:
        if rv == 0:
            raise bad_request('resourceVersionMatch: Forbidden: resourceVersionMatch "Exact" '
                              'is forbidden for resourceVersion "0"')
        return ListPlan(read_rv=rv, start=None, limit=limit)
    # NotOlderThan, or a version without a match (the same for a list): now, if not older.
    return ListPlan(read_rv=None, start=None, limit=limit, min_rv=rv or None)


def watch_plan(query: Mapping[str, str], *, bookmarks: bool) -> WatchPlan:
    send = query.get("sendInitialEvents", "")
    match = _match(query)
    if send not in ("", "true", "false"):
        raise bad_request(f'sendInitialEvents: Invalid value: "{send}": must be true or false')
    if send == "":
        if match:
            raise bad_request("resourceVersionMatch: Forbidden: resourceVersionMatch is "
                              "forbidden for watch unless sendInitialEvents is provided")
        return WatchPlan(send_initial_events=False)
    if match != NOT_OLDER_THAN:
        raise bad_request("resourceVersionMatch: Forbidden: sendInitialEvents requires "
                          "setting resourceVersionMatch to NotOlderThan")
    if not bookmarks:
        raise bad_request("allowWatchBookmarks: Forbidden: sendInitialEvents requires "
                          "allowWatchBookmarks=true")
    rv_text = query.get("resourceVersion", "")
    min_rv = _rv(rv_text) if rv_text else 0
    return WatchPlan(send_initial_events=send == "true", min_rv=min_rv or None)
