"""``rootdisk image-upload``'s pure parts: what it creates, how it reads the target."""

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
