"""Fixtures of the API server's tests (defined in ``server_fixtures``)."""

from .server_fixtures import (  # noqa: F401
    api,
    fresh_server,
    namespace,
    raw,
    shared_server,
    widgets,
)
