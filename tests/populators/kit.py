"""Helpers for the populator tests on localcluster: the CRDs the populator reads, objects
to create, the operator run in-process with kopf, and waits."""

from __future__ import annotations

import gc
import glob
import os
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import yaml
from kopf.testing import KopfRunner

import kubeclient
from kubeclient import Client, resources
from kubeclient.resources import CDICONFIGS, CRDS
from kubeclient.resources import IMPORT_SOURCES as VIS
from tests.localcluster.clusterkit import events_for as events_for  # its tests read it here
from tests.localcluster.clusterkit import wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _minimal_crd(kind: str, plural: str, scope: str) -> dict[str, Any]:
    """A schemaless stand-in, used only while the cdi branch's CRDs are not merged."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.cdi.kubevirt.io"},
        "spec": {"group": "cdi.kubevirt.io", "scope": scope,
                 "names": {"kind": kind, "plural": plural, "singular": kind.lower(),
                           "listKind": kind + "List"},
                 "versions": [{"name": "v1beta1", "served": True, "storage": True,
                               "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {
                                   "type": "object",
                                   "x-kubernetes-preserve-unknown-fields": True}}}]},
    }


def project_crds() -> dict[str, dict[str, Any]]:
    """The project's CRD manifests (manifests/crds), by name."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "manifests", "crds", "*.y*ml"))):
        with open(path, encoding="utf-8") as fh:
            for doc in yaml.safe_load_all(fh):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    found[doc["metadata"]["name"]] = doc
    return found


def install_crds(kube: Client) -> None:
    have = project_crds()
    for kind, plural, scope in (("VolumeImportSource", "volumeimportsources", "Namespaced"),
                                ("CDIConfig", "cdiconfigs", "Cluster")):
        name = f"{plural}.cdi.kubevirt.io"
        crd = have.get(name) or _minimal_crd(kind, plural, scope)
        if kube.get_or_none(CRDS, name) is None:
            kube.create(CRDS, crd)
    for res in (VIS, CDICONFIGS):
        wait_for(lambda r=res: _served(kube, r), what=f"{res.plural} served")


def _served(kube: Client, res: kubeclient.Resource) -> bool:
    try:
        kube.list(res, "default" if res.namespaced else None)
        return True
    except kubeclient.KubeError:
        return False


def set_cdiconfig_status(kube: Client, status: dict[str, Any]) -> None:
    obj = kube.get_or_none(CDICONFIGS, "config")
    if obj is None:
        obj = kube.create(CDICONFIGS, {"apiVersion": "cdi.kubevirt.io/v1beta1",
                                       "kind": "CDIConfig", "metadata": {"name": "config"},
                                       "spec": {}})
    obj["status"] = status
    kube.replace(CDICONFIGS, obj, subresource="status")


def namespace(kube: Client, prefix: str = "pop") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    kube.create(resources.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                    "metadata": {"name": name}})
    return name


def import_source(kube: Client, ns: str, name: str, source: dict[str, Any],
                  **spec: Any) -> dict[str, Any]:
    return kube.create(VIS, {"apiVersion": "cdi.kubevirt.io/v1beta1",
                             "kind": "VolumeImportSource", "metadata": {"name": name},
                             "spec": {"source": source, **spec}}, ns)


def target_claim(kube: Client, ns: str, name: str, *, source: str, size: str = "64Mi",
                 sc: str = "local-immediate", mode: str = "Filesystem",
                 annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return kube.create(resources.PVCS, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "annotations": {
            "cdi.kubevirt.io/storage.pod.restarts": "0", **(annotations or {})}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": sc,
                 "volumeMode": mode, "resources": {"requests": {"storage": size}},
                 "dataSourceRef": {"apiGroup": "cdi.kubevirt.io",
                                   "kind": "VolumeImportSource", "name": source}},
    }, ns)


@contextmanager
def operator(kubeconfig: str, **env: str) -> Iterator[KopfRunner]:
    """The populators' kopf handlers, run in this process as the operator would."""
    saved = {k: os.environ.get(k) for k in ("KUBECONFIG", *env)}
    os.environ["KUBECONFIG"] = kubeconfig
    os.environ.update(env)
    try:
        with KopfRunner(["run", "-A", "--standalone", "-m", "populators.handlers"],
                        timeout=60) as runner:
            yield runner
        # KopfRunner stops kopf's loop from another thread, abandoning its HTTP sessions'
        # connections: collect them here, where their ResourceWarnings are expected,
        # rather than in whatever test the garbage collector happens to run in next.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def annotations(kube: Client, ns: str, name: str) -> dict[str, str]:
    obj = kube.get_or_none(resources.PVCS, name, ns) or {}
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def diagnosis(kube: Client, ns: str) -> str:
    """The namespace's claims' annotations and pods' container states, for failures."""
    lines = []
    for c in kube.list(resources.PVCS, ns):
        lines.append(f"claim {c['metadata']['name']} {c.get('status', {}).get('phase')}: "
                     f"{c['metadata'].get('annotations')}")
    for p in kube.list(resources.PODS, ns):
        states = [(s.get("state"), s.get("lastState"), s.get("restartCount"))
                  for s in p.get("status", {}).get("containerStatuses") or []]
        lines.append(f"pod {p['metadata']['name']} {p.get('status', {}).get('phase')}: "
                     f"{states}")
    return "\n".join(lines)


def wait_for_why(fn: Any, *, timeout: float, what: str, why: Any) -> Any:
    """:func:`wait_for`, with ``why()`` (e.g. :func:`diagnosis`) in the failure."""
    try:
        return wait_for(fn, timeout=timeout, what=what)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{why()}") from None


def wait_bound(kube: Client, ns: str, name: str, timeout: float = 120) -> dict[str, Any]:
    try:
        wait_for(lambda: (kube.get_or_none(resources.PVCS, name, ns) or {}).get(
            "status", {}).get("phase") == "Bound", timeout=timeout, what=f"{name} Bound")
    except AssertionError as err:
        raise AssertionError(f"{err}\n{diagnosis(kube, ns)}") from None
    return kube.get(resources.PVCS, name, ns)
