"""The real API server's fixtures, for the adapter tests (``test_kube_exists``)."""

from tests.localcluster.apiserver.server_fixtures import (  # noqa: F401
    api,
    namespace,
    raw,
    shared_server,
)
