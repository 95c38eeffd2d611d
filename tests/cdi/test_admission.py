"""AdmissionReview round trip of the DataVolume webhook (pure)."""

from __future__ import annotations

from typing import Any

from cdi.admission import review
from tests.cdi.builders import dv


def req(op: str, obj: dict[str, Any], old: dict[str, Any] | None = None,
        kind: str = "DataVolume") -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "r1", "kind": {"kind": kind}, "operation": op,
                        "namespace": "ns", "object": obj, "oldObject": old}}


def test_allowed_and_refused() -> None:
    seen: list[tuple[str, str, str]] = []

    def exists(kind: str, name: str, ns: str) -> bool:
        seen.append((kind, name, ns))
        return False

    ok = review(req("CREATE", dv(storage={"resources": {"requests": {"storage": "1Gi"}}})),
                exists=exists)
    assert ok == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "response": {"uid": "r1", "allowed": True}}
    bad = dv(storage={"resources": {"requests": {"storage": "1Gi"}}},
             source={"http": {"url": "ftp://x/y", "secretRef": "s"}})
    out = review(req("CREATE", bad), exists=exists)["response"]
    assert out["allowed"] is False and out["status"]["code"] == 422
    assert out["status"]["message"] == \
        " spec.source.HTTP.url: spec.source Invalid source URL scheme: ftp://x/y"
    assert seen == []  # upstream's rule refused it first: nothing looked up
    missing = dv(storage={"resources": {"requests": {"storage": "1Gi"}}},
                 source={"http": {"url": "https://x/y", "secretRef": "s"}})
    out = review(req("CREATE", missing), exists=exists)["response"]
    assert "spec.source.http.secretRef: Secret 's' not found" in out["status"]["message"]
    assert seen == [("Secret", "s", "ns")]
    changed = review(req("UPDATE", dv(storage={}), old=dv(storage={"a": 1})), exists=exists)
    assert changed["response"]["allowed"] is False
    other = review(req("CREATE", {}, kind="Pod"), exists=exists)
    assert other["response"]["allowed"] is True


def test_a_refusal_is_shaped_as_cdis() -> None:
    """CDI's toRejectedAdmissionResponse: 422, no reason, every cause in details and in
    the message, each after a space."""
    bad = dv(storage={"resources": {"requests": {"storage": "1Gi"}}},
             source={"http": {"url": "ftp://x/y"}, "registry": {"url": "docker://x"}})
    status = review(req("CREATE", bad), exists=lambda *a: False)["response"]["status"]
    assert "reason" not in status and status["code"] == 422
    causes = status["details"]["causes"]
    assert (causes[0]["reason"], causes[0]["field"]) == ("FieldValueInvalid", "spec.source")
    assert causes[0]["message"] == "Multiple Data volume sources"
    assert status["message"] == "".join(f" {c['field']}: {c['message']}" for c in causes)
    assert status["message"].startswith(" spec.source: ")


def test_an_existing_claim_is_looked_up_as_metadata_and_refused() -> None:
    asked: list[tuple[str, str, str]] = []

    def metadata(kind: str, name: str, ns: str) -> dict[str, Any] | None:
        asked.append((kind, name, ns))
        return {"name": name, "namespace": ns}
    good = dv(storage={"resources": {"requests": {"storage": "1Gi"}}})
    out = review(req("CREATE", good), exists=lambda *a: True, metadata=metadata)["response"]
    assert out["allowed"] is False
    assert out["status"]["details"]["causes"] == [{
        "reason": "FieldValueInvalid", "field": "DataVolume.Name",
        "message": f"Destination PVC ns/{good['metadata']['name']} already exists"}]
    assert asked == [("PersistentVolumeClaim", good["metadata"]["name"], "ns")]


def test_the_adoption_gate_is_read_from_cdiconfig_only_when_the_claim_exists() -> None:
    reads: list[int] = []

    def gates() -> frozenset[str]:
        reads.append(1)
        return frozenset({"DataVolumeClaimAdoption"})
    good = dv(storage={"resources": {"requests": {"storage": "1Gi"}}})
    out = review(req("CREATE", good), exists=lambda *a: True, feature_gates=gates,
                 metadata=lambda kind, name, ns: {"name": name, "namespace": ns})["response"]
    assert out["allowed"] is True  # adopted under the gate
    assert reads == [1]
    out = review(req("CREATE", good), exists=lambda *a: True, feature_gates=gates,
                 metadata=lambda kind, name, ns: None)["response"]
    assert out["allowed"] is True and reads == [1]  # no claim: the config is not read
