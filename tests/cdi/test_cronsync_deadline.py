"""A DataImportCron whose registry trickles its manifest (a byte well within the per-read
timeout): the controller's poll ends at its deadline, reported as any failed poll is
(Event ``DigestPollFailed``, polled again after POLL_RETRY), against a real API server
and the hostile loopback registry of tests/ociregistry/test_bounded_reads.py."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator

import pytest

from cdi import cronsync, importcron
from kubeclient import Client
from kubeclient.resources import CDICONFIGS, CRDS, DATAIMPORTCRONS, EVENTS
from localcluster.storage.snapshot_api import snapshot_crd
from tests.cdi.conftest import cdi_client
from tests.ociregistry.test_bounded_reads import (  # noqa: F401
    DEADLINE,
    MARGIN,
    TRICKLED,
    Hostile,
    hostile,
)
from vocab import cdi as api

NS = "golden"
KUBE_MARGIN = 2.0
"""The reconcile's API calls around the poll."""


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    with cdi_client(tmp_path_factory.mktemp("apiserver"),
                    crds=("dataimportcrons.yaml", "datasources.yaml", "datavolumes.yaml",
                          "cdiconfigs.yaml"),
                    served="/apis/cdi.kubevirt.io/v1beta1/dataimportcrons",
                    namespaces=(NS,)) as c:
        c.create(CRDS, snapshot_crd())
        yield c


def test_a_trickling_registry_fails_the_poll_at_its_deadline(
        client: Client, hostile: tuple[Hostile, int],  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    state, port = hostile
    monkeypatch.setattr(cronsync, "POLL_TIMEOUT", 5.0)
    monkeypatch.setattr(cronsync, "POLL_DEADLINE", DEADLINE)
    client.create(CDICONFIGS, {"apiVersion": api.API_VERSION, "kind": "CDIConfig",
                               "metadata": {"name": api.CONFIG_NAME},
                               "spec": {"insecureRegistries": [f"127.0.0.1:{port}"]}})
    url = f"docker://127.0.0.1:{port}/golden:trickle"
    client.create(DATAIMPORTCRONS, {
        "apiVersion": api.API_VERSION, "kind": "DataImportCron",
        "metadata": {"name": "slow", "namespace": NS},
        "spec": {"schedule": "0 */12 * * *", "managedDataSource": "slow",
                 "template": {"spec": {"source": {"registry": {"url": url}},
                                       "storage": {"resources": {"requests": {
                                           "storage": "1Gi"}}}}}}})

    started = dt.datetime.now(dt.UTC).replace(microsecond=0)
    clock = time.monotonic()
    cronsync.reconcile_cron(client, NS, "slow")
    assert time.monotonic() - clock < DEADLINE + MARGIN + KUBE_MARGIN
    assert state.closed["trickle"].wait(10), "the registry never saw the poll hang up"
    assert 0 < state.sent["trickle"] < len(TRICKLED)

    events = [e for e in client.list(EVENTS, NS)
              if e["involvedObject"]["name"] == "slow" and e["reason"] == "DigestPollFailed"]
    assert [(e["type"], e["message"]) for e in events] == [(
        "Warning", f"polling {url}: reading manifest trickle in 127.0.0.1:{port}/golden: "
        f"context deadline exceeded (127.0.0.1:{port} did not answer in full within 1 s)")]
    annotations = client.get(DATAIMPORTCRONS, "slow", NS)["metadata"]["annotations"]
    assert api.SOURCE_DESIRED_DIGEST not in annotations
    retry = importcron.parse_time(annotations[api.NEXT_CRON_TIME])
    assert retry is not None
    assert started + importcron.POLL_RETRY <= retry <= started + importcron.POLL_RETRY \
        + dt.timedelta(seconds=DEADLINE + MARGIN + KUBE_MARGIN + 1)
