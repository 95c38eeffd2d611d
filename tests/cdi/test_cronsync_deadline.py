"""A DataImportCron whose registry trickles its manifest (a byte well within the per-read
timeout): the controller's poll ends at its deadline, reported as any failed poll is
(Event ``DigestPollFailed``, polled again after POLL_RETRY), against a real API server
and the hostile loopback registry of tests/ociregistry/test_bounded_reads.py."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator

import pytest

from cdi import cronsync, importcron
from kubeclient import Client
from kubeclient.resources import CDICONFIGS, CRDS, DATAIMPORTCRONS, EVENTS
from localcluster.storage.snapshot_api import snapshot_crd
from tests.cdi.conftest import cdi_client
from tests.localcluster.clusterkit import wait_for
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
HELD = 4.0
"""A poll's deadline where a test needs it held long enough to see what else runs (the
trickled answer takes 5 s whole)."""


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


def test_a_cron_held_by_its_registry_holds_up_no_other_cron(
        client: Client, hostile: tuple[Hostile, int],  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller's reconciles of two crons, as its handler threads run them (through
    ``cdi.handlers._cron``, not imported here: its kopf handlers would join every kopf
    operator this test process runs): while one cron's poll is held by a trickling
    registry (up to the deadline), another cron's reconcile runs to its end (its poll
    fails at once: a 500), and a second reconcile of the held cron waits for the first
    (then finds the next poll scheduled: one poll)."""
    state, port = hostile
    monkeypatch.setattr(cronsync, "POLL_TIMEOUT", 5.0)
    monkeypatch.setattr(cronsync, "POLL_DEADLINE", HELD)
    config = client.get_or_none(CDICONFIGS, api.CONFIG_NAME)
    spec = {"insecureRegistries": [f"127.0.0.1:{port}"]}
    if config is None:
        client.create(CDICONFIGS, {"apiVersion": api.API_VERSION, "kind": "CDIConfig",
                                   "metadata": {"name": api.CONFIG_NAME}, "spec": spec})
    else:
        client.patch(CDICONFIGS, api.CONFIG_NAME, {"spec": spec})
    for name, tag in (("held", "trickle"), ("other", "error")):
        client.create(DATAIMPORTCRONS, {
            "apiVersion": api.API_VERSION, "kind": "DataImportCron",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"schedule": "0 */12 * * *", "managedDataSource": name,
                     "template": {"spec": {
                         "source": {"registry": {"url": f"docker://127.0.0.1:{port}/golden:{tag}"}},
                         "storage": {"resources": {"requests": {"storage": "1Gi"}}}}}}})

    held = threading.Thread(target=cronsync.reconcile_cron_locked, args=(client, NS, "held"),
                            name="held")
    again = threading.Thread(target=cronsync.reconcile_cron_locked,
                             args=(client, NS, "held"), name="again")
    held.start()
    try:
        wait_for(lambda: state.sent.get("trickle", 0) > 0, timeout=HELD / 2,
                 what="the held cron's poll under way")
        again.start()
        clock = time.monotonic()
        cronsync.reconcile_cron_locked(client, NS, "other")
        took = time.monotonic() - clock
        assert held.is_alive(), "the held poll ended first: nothing was held up"
        assert took < HELD / 2, took
        reasons = [e["reason"] for e in client.list(EVENTS, NS)
                   if e["involvedObject"]["name"] == "other"]
        assert reasons == ["DigestPollFailed"], reasons
    finally:
        held.join(HELD + MARGIN + KUBE_MARGIN)
        if again.ident is not None:
            again.join(KUBE_MARGIN)
    assert not held.is_alive() and not again.is_alive()
    assert state.trickled == {"trickle": 1}
