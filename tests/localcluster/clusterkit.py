"""Helpers for tests that run a whole localcluster in-process: builders and waits."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import kubeclient
from kubeclient import Client, resources
from localcluster.cluster import Cluster, Options
from localcluster.kubelet.restarts import BackoffSettings
from localcluster.storage.volumes import GiB
from rootdisk.images import IMAGES

TESTBOX = os.path.join(os.path.dirname(__file__), "testbox.py")
IMAGE = "registry.example.com/rootdisk/testbox:test"
SCALE = 0.02
"""Back-off scale in tests: first restart after 0.2 s, cap 6 s."""

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("bwrap") is None,
    reason="localcluster needs root (mount, losetup) and bubblewrap")


def options(**kw: Any) -> Options:
    """Test options: rootdisk's image table (the project's pods run as under ``rootdisk
    up``), the test box image, fast back-off and heartbeat, no manifests."""
    base: dict[str, Any] = {
        "images": IMAGES,
        "extra_images": {"rootdisk/testbox": ["python", TESTBOX]},
        "backoff": BackoffSettings(scale=SCALE),
        "reflink_pool_size": 4 * GiB,
        "heartbeat": 1.0,
        "shutdown_grace": 2.0,
        "manifests": "/nonexistent",
    }
    base.update(kw)
    return Options(**base)


@contextmanager
def running(data_dir: str, **kw: Any) -> Iterator[Cluster]:
    cluster = Cluster(data_dir, options(**kw))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def wait_for(fn: Callable[[], Any], *, timeout: float = 30, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; last value: {last!r}")


def events_for(kube: Client, ns: str, uid: str) -> list[dict[str, Any]]:
    """The Events in ``ns`` about the object whose UID is ``uid``."""
    return [e for e in kube.list(resources.EVENTS, ns)
            if (e.get("involvedObject") or {}).get("uid") == uid]


def event_reasons(kube: Client, ns: str, uid: str) -> list[str]:
    """The reasons of :func:`events_for`."""
    return [str(e.get("reason")) for e in events_for(kube, ns, uid)]


def wait_reasons(kube: Client, ns: str, uid: str, *wanted: str,
                 timeout: float = 30) -> list[str]:
    """:func:`event_reasons` once every one of ``wanted`` is among them. A controller
    writes an object's status first and its Event after it: a test that waited for the
    status may read the Events a moment too early."""
    found: list[str] = []

    def seen() -> bool:
        found[:] = event_reasons(kube, ns, uid)
        return set(wanted) <= set(found)
    try:
        wait_for(seen, timeout=timeout, what=f"Events {', '.join(wanted)}")
    except AssertionError as err:  # which reasons there were, as of the last look
        raise AssertionError(f"{err}; the reasons seen: {found}") from None
    return found


def pvc(name: str, *, size: str = "64Mi", sc: str | None = None, mode: str | None = None,
        **spec: Any) -> dict[str, Any]:
    s: dict[str, Any] = {"accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": size}}, **spec}
    if sc:
        s["storageClassName"] = sc
    if mode:
        s["volumeMode"] = mode
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name}, "spec": s}


def pod(name: str, *args: str, restart: str = "Never", image: str = IMAGE,
        volumes: list[dict[str, Any]] | None = None, mounts: list[dict[str, Any]] | None = None,
        devices: list[dict[str, Any]] | None = None, env: list[dict[str, Any]] | None = None,
        grace: int | None = None, **container: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "main", "image": image, "args": list(args),
                         "env": [{"name": "POD_NAME",
                                  "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                                 *(env or [])], **container}
    if mounts:
        c["volumeMounts"] = mounts
    if devices:
        c["volumeDevices"] = devices
    spec: dict[str, Any] = {"restartPolicy": restart, "containers": [c]}
    if volumes:
        spec["volumes"] = volumes
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def claim_volume(name: str, claim: str) -> dict[str, Any]:
    return {"name": name, "persistentVolumeClaim": {"claimName": claim}}


def get(kube: Client, res: kubeclient.Resource, name: str, ns: str = "default") -> dict[str, Any]:
    return kube.get(res, name, ns)


def phase(kube: Client, res: kubeclient.Resource, name: str, ns: str = "default") -> str:
    obj = kube.get_or_none(res, name, ns)
    return str(((obj or {}).get("status") or {}).get("phase"))


def wait_phase(kube: Client, res: kubeclient.Resource, name: str, want: str | tuple[str, ...],
               ns: str = "default", timeout: float = 30) -> dict[str, Any]:
    wants = (want,) if isinstance(want, str) else want
    wait_for(lambda: phase(kube, res, name, ns) in wants, timeout=timeout,
             what=f"{res.plural} {name} to be {want}")
    return get(kube, res, name, ns)


def logs(kube: Client, name: str, ns: str = "default", **query: Any) -> str:
    resp = kube.api.call_api(resources.PODS.path(ns, name, "log"), "GET",
                             query_params=list(query.items()), auth_settings=["BearerToken"],
                             _preload_content=False, _request_timeout=30)
    data = (resp[0] if isinstance(resp, tuple) else resp).data
    return bytes(data).decode()


def try_logs(kube: Client, name: str, ns: str = "default") -> str:
    """The logs, or "" while the container has none yet."""
    try:
        return logs(kube, name, ns)
    except Exception:
        return ""


def main_status(p: dict[str, Any]) -> dict[str, Any]:
    statuses: list[dict[str, Any]] = (p.get("status") or {}).get("containerStatuses") or []
    return statuses[0] if statuses else {}
