"""The real API server's fixtures, for the adapter tests (``test_kube_exists``), and a
CDI client on a server of its own with the CRDs and namespaces a test module names."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from kubeclient import Client
from kubeclient.resources import CRDS, NAMESPACES
from localcluster.apiserver.threaded import ServerThread
from tests.localcluster.apiserver.server_fixtures import (  # noqa: F401
    api,
    namespace,
    raw,
    shared_server,
)
from tests.vm.conftest import kube_for, wait_served

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def cdi_client(data_dir: Path, *, crds: tuple[str, ...], served: str,
               namespaces: tuple[str, ...]) -> Iterator[Client]:
    """A Client of a fresh API server with ``crds`` (files of manifests/crds) created,
    ``served`` (an API path) answering, and ``namespaces`` made."""
    thread = ServerThread(data_dir)
    server = thread.start()
    c = Client(kube_for(server).configuration)
    try:
        for name in crds:
            c.create(CRDS, yaml.safe_load((ROOT / "manifests" / "crds" / name).read_text()))
        wait_served(kube_for(server), served)
        for ns in namespaces:
            c.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": ns}})
        yield c
    finally:
        c.close()
        thread.stop()
