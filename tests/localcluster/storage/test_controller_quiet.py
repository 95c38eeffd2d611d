"""The storage controller on a write that lost to a newer state: a 409 (someone wrote the
claim since the pass read it) or a 404 (it was deleted since) is logged at DEBUG — the
watch brings the newer state and the next pass acts on it — while any other failure
still warns. The claims, volumes and API here are fakes: only the controller's handling
of the API's answer is under test."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from kubeclient import KubeError
from localcluster.services.controller import ServiceController
from localcluster.storage.controller import StorageController


class FakeInformer:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    def list(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return list(self.items)

    def get(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return next((o for o in self.items if o["metadata"]["name"] == name), None)

    def add_listener(self, fn: Any) -> None:
        pass


class RefusingKube:
    """Every write fails with ``status``; the writes tried are recorded."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.writes: list[str] = []

    def _refuse(self, verb: str, *args: Any, **kw: Any) -> Any:
        self.writes.append(verb)
        raise KubeError(self.status, {409: "Conflict", 404: "Not Found"}.get(
            self.status, "Internal Server Error"), {"message": "the object has been modified"})

    def patch(self, *args: Any, **kw: Any) -> Any:
        return self._refuse("patch")

    def create(self, *args: Any, **kw: Any) -> Any:
        return self._refuse("create")

    def replace(self, *args: Any, **kw: Any) -> Any:
        return self._refuse("replace")


def claim() -> dict[str, Any]:
    return {"metadata": {"name": "c", "namespace": "ns", "uid": "u1", "resourceVersion": "5"},
            "spec": {"resources": {"requests": {"storage": "1Mi"}}}}


def storage(kube: RefusingKube) -> StorageController:
    return StorageController(kube, None, node="n", claims=FakeInformer([claim()]),
                             pvs=FakeInformer([]), storage_classes=FakeInformer([]),
                             pods=FakeInformer([]), snapshots=FakeInformer([]),
                             contents=FakeInformer([]), store=None)


@pytest.mark.parametrize("status", [409, 404])
def test_stale_claim_writes_are_not_warnings(status: int, caplog: pytest.LogCaptureFixture) -> None:
    kube = RefusingKube(status)
    with caplog.at_level(logging.DEBUG, logger="localcluster.storage.controller"):
        storage(kube).reconcile()
    assert kube.writes  # the pass did try to write the claim (status, finalizer)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(str(status) in r.getMessage() for r in caplog.records)  # still in the debug log


def test_other_failures_still_warn(caplog: pytest.LogCaptureFixture) -> None:
    kube = RefusingKube(500)
    with caplog.at_level(logging.INFO, logger="localcluster.storage.controller"):
        storage(kube).reconcile()
    assert [r for r in caplog.records if r.levelno == logging.WARNING and "500" in r.getMessage()]


@pytest.mark.parametrize(("status", "warned"), [(409, False), (500, True)])
def test_service_endpoints_conflict_is_quiet(status: int, warned: bool,
                                             caplog: pytest.LogCaptureFixture) -> None:
    svc = {"metadata": {"name": "s", "namespace": "ns"},
           "spec": {"clusterIP": "127.2.0.9", "selector": {"app": "x"},
                    "ports": [{"port": 80}]}}
    kube = RefusingKube(status)
    ctl = ServiceController(kube, services=FakeInformer([svc]),
                            endpoints_=FakeInformer([]), pods=FakeInformer([]))
    with caplog.at_level(logging.DEBUG, logger="localcluster.services.controller"):
        ctl.reconcile()
    assert kube.writes == ["create"]  # the Endpoints, which (409) already exist
    assert bool([r for r in caplog.records if r.levelno >= logging.WARNING]) == warned
