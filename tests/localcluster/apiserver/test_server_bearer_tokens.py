"""A bearer token is whatever the client sends: non-ASCII bytes, a NUL, 8 KB of it. Each is
answered like a wrong token, 401 (or aiohttp's 400 for what HTTP does not allow in a
header), never with a 500, and nothing of it lands in the log as a traceback: one request
each used to log a traceback (``hmac.compare_digest`` refuses non-ASCII ``str``, PyJWT
raises UnicodeEncodeError on the lone surrogates aiohttp decodes such bytes to), so any
client could flood the log."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from .server_fixtures import Raw, exact_request

TOKENS = {
    "latin-1 é": b"\xe9",
    "UTF-8 é": "é".encode(),
    "JWT-shaped, not UTF-8": b"\xe9.a.b",
    "JWT-shaped, UTF-8": "é.é.é".encode(),
    "admin token with a non-ASCII tail": None,  # filled in from the server's
    "8000 bytes": b"x" * 8000,
    "8000 bytes, JWT-shaped": b"a.b." + b"c" * 7996,
}


def _request(server, authorization: bytes) -> tuple[int, Any]:
    return exact_request(server, "/api/v1/namespaces", authorization)


def _no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.WARNING]
    assert not bad, [r.getMessage() for r in bad]


@pytest.mark.parametrize("token", TOKENS.values(), ids=TOKENS.keys())
def test_a_malformed_bearer_token_is_401(shared_server, caplog, token):
    if token is None:
        token = shared_server.admin_token.encode() + b"\xe9"
    caplog.set_level(logging.DEBUG)
    for _ in range(3):
        code, body = _request(shared_server, b"Bearer " + token)
        assert code == 401, body
        assert body["reason"] == "Unauthorized"
    _no_traceback(caplog)


@pytest.mark.parametrize("header", [b"Bearer a\x00b", b"Bearer \x00", b"Bearer a\x01b",
                                    b"Bearer " + b"x" * 9000])
def test_what_http_does_not_allow_in_a_header_is_400_without_a_traceback(
        shared_server, caplog, header):
    """aiohttp's parser refuses these before any handler (as Go's server refuses a control
    character in a header); it used to log each at ERROR with a traceback and the start of
    the line, the token's."""
    caplog.set_level(logging.DEBUG)
    code, _ = _request(shared_server, header)
    assert code == 400
    _no_traceback(caplog)
    assert not any("Bearer" in r.getMessage() for r in caplog.records)


def test_the_right_token_still_works(shared_server):
    assert _request(shared_server, f"Bearer {shared_server.admin_token}".encode())[0] == 200


@pytest.mark.parametrize("token", ["\udce9", "\udce9.a.b", "é.a.b", "a\x00b", "\ud800",
                                   "x" * 100_000, "a.b." + "é" * 1000])
def test_token_review_of_a_malformed_token(shared_server, caplog, token):
    caplog.set_level(logging.DEBUG)
    code, body = Raw(shared_server).request(
        "POST", "/apis/authentication.k8s.io/v1/tokenreviews",
        raw=json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                        "spec": {"token": token}}).encode())
    assert code == 201, body
    assert body["status"]["authenticated"] is False
    _no_traceback(caplog)
