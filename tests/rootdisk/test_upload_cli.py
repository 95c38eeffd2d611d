"""``rootdisk image-upload``'s pure parts: what it creates, how it reads the target, and
how its wait paces itself (against a stand-in server, named as such below)."""

from __future__ import annotations

from typing import Any

import pytest

from rootdisk.cmd_upload import manifests, state

P = "cdi.kubevirt.io/"


def test_dv_mode_creates_an_upload_datavolume() -> None:
    [(path, dv)] = manifests(kind="dv", name="d", namespace="ns", size="1Gi",
                             storage_class="fast", access_mode="ReadWriteOnce", block=True,
                             force_bind=True)
    assert path == "/apis/cdi.kubevirt.io/v1beta1/namespaces/ns/datavolumes"
    assert dv["spec"]["source"] == {"upload": {}}
    assert dv["spec"]["storage"] == {"resources": {"requests": {"storage": "1Gi"}},
                                     "storageClassName": "fast",
                                     "accessModes": ["ReadWriteOnce"], "volumeMode": "Block"}
    assert dv["metadata"]["annotations"] == {P + "storage.bind.immediate.requested": ""}


def test_pvc_mode_creates_a_source_and_a_claim_naming_it() -> None:
    (_, source), (path, pvc) = manifests(kind="pvc", name="p", namespace="ns", size="2Gi",
                                         storage_class=None, access_mode=None, block=False)
    assert source["kind"] == "VolumeUploadSource"
    assert path == "/api/v1/namespaces/ns/persistentvolumeclaims"
    assert pvc["spec"]["dataSourceRef"]["name"] == source["metadata"]["name"]
    assert P + "storage.upload.target" in pvc["metadata"]["annotations"]
    assert P + "storage.bind.immediate.requested" not in pvc["metadata"]["annotations"]


def _dv(phase: str, **running: str) -> dict[str, Any]:
    return {"status": {"phase": phase, "conditions": [{"type": "Running", **running}]}}


@pytest.mark.parametrize(("kind", "obj", "what"), [
    ("dv", None, "failed"),
    ("dv", _dv("UploadScheduled"), "waiting"),
    ("dv", _dv("UploadReady"), "ready"),
    ("dv", _dv("Succeeded"), "done"),
    ("dv", _dv("Failed", reason="TooSmall", message="m"), "failed"),
    ("pvc", {"metadata": {"annotations": {P + "storage.pod.ready": "true"}},
             "status": {"phase": "Pending"}}, "ready"),
    ("pvc", {"metadata": {"annotations": {}}, "status": {"phase": "Bound"}}, "done"),
    ("pvc", {"metadata": {"annotations": {P + "storage.pod.phase": "Failed"}},
             "status": {"phase": "Pending"}}, "failed"),
])
def test_state(kind: str, obj: Any, what: str) -> None:
    assert state(kind=kind, obj=obj)[0] == what


def test_failed_state_carries_the_reason() -> None:
    assert state(kind="dv", obj=_dv("Failed", reason="TooSmall", message="too small")) == \
        ("failed", "TooSmall: too small")


class _EndsEveryWatch:
    """Stands in for an API server that ends every watch at once (or answers it with an
    ERROR event): the wait must not turn into a tight loop of reads."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = events
        self.watches = 0

    def watch(self, *_: Any, **__: Any) -> Any:
        self.watches += 1
        return iter(self.events)


@pytest.mark.parametrize("events", [[], [{"type": "ERROR", "object": {"code": 410}}]])
def test_the_wait_paces_watches_that_end_at_once(events: list[dict[str, Any]]) -> None:
    import time

    from rootdisk.cmd_upload import POLL, _await

    waiting = {"metadata": {"resourceVersion": "1"}, "status": {"phase": "UploadScheduled"}}
    reads = 0

    def get() -> dict[str, Any]:
        nonlocal reads
        reads += 1
        return waiting

    server = _EndsEveryWatch(events)
    started = time.monotonic()
    what, detail = _await(server, kind="dv", ns="ns", name="d", get=get, until=("ready",),
                          deadline=started + 1.0)
    assert (what, detail) == ("timeout", "UploadScheduled")
    assert reads <= 1.0 / POLL + 2 and server.watches <= 1.0 / POLL + 1
    assert time.monotonic() - started < 3
