"""Secrets out of every text that leaves the importer.

A presigned URL carries its signature in the query, a ``user:password@`` URL its
password in the userinfo, and the HTTP client's exception text repeats the request's
path and query (``...Max retries exceeded with url: /b/k?X-Amz-Signature=...``). Every
error message (``ImporterError`` redacts its own) and every log record (``LogFilter``)
goes through ``redact_text``, so the termination message, ``--json`` output and logs
never hold them.
"""

from __future__ import annotations

import logging
import re

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
# A path with a query anywhere else in a text: urllib3's "url: /path?query", a request
# line, a Location header.
_PATH_QUERY = re.compile(r"(?P<path>(?:^|(?<=[\s(=:'\"]))/[^\s?'\"]*)\?[^\s'\")]+")
MASK = "?…"


def redact_url(url: str) -> str:
    """A URL fit for logs: no userinfo, no query (presigned URLs carry signatures there)."""
    base = url.split("?", 1)[0].split("#", 1)[0]
    scheme, sep, rest = base.partition("://")
    host, slash, path = rest.partition("/")
    if "@" in host:
        host = host.rsplit("@", 1)[1]
    return f"{scheme}{sep}{host}{slash}{path}" + (MASK if "?" in url else "")


def redact_text(text: str) -> str:
    """``text`` with every URL redacted and every path's query masked."""
    text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    return _PATH_QUERY.sub(lambda m: m.group("path") + MASK, text)


class LogFilter(logging.Filter):
    """Redacts each record's formatted message (arguments included)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact_text(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = redact_text(logging.Formatter().formatException(record.exc_info))
        return True


def install_log_filter() -> None:
    """Put ``LogFilter`` on every handler of the root logger (after basicConfig)."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(LogFilter())
