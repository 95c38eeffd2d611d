"""Apply YAML manifests through the API, as a user's ``kubectl apply`` would.

Objects are created with the manifest recorded in the
``kubectl.kubernetes.io/last-applied-configuration`` annotation, as kubectl records it.
An object that exists already gets kubectl's three-way merge patch
(:func:`kubeclient.mergepatch.three_way`): what the manifest now sets differently, and
the removal of what the last applied manifest had and this one has not. What no manifest
names (a Deployment scaled by hand, a field a user added to the KubeVirt CR, an
APIService's caBundle written by its server) survives ``rootdisk up`` started again;
before, every object was replaced whole. Unlike kubectl, lists are set whole for every
kind (kubectl merges some built-in kinds' lists item by item, such as webhooks by name).

The resource of each ``apiVersion``/``kind`` comes from the server's discovery, refreshed
when a kind is unknown (a CRD applied a moment ago becomes servable shortly after).
Within a directory, Namespaces, CRDs and RBAC objects go first.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import time
from collections.abc import Iterable

import yaml

from kubeclient import MERGE, Client, KubeError, Obj, Resource, mergepatch

logger = logging.getLogger(__name__)

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

ORDER = ["Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "Role",
         "ClusterRoleBinding", "RoleBinding", "ConfigMap", "Secret", "Service"]
SUBDIRS = ("crds", "rbac", "deploy")


class ManifestError(Exception):
    """A manifest cannot be applied; the message names the file and object."""


class Discovery:
    def __init__(self, kube: Client) -> None:
        self.kube = kube
        self._cache: dict[tuple[str, str], Resource] = {}

    def _load(self, api_version: str) -> None:
        group, _, version = api_version.rpartition("/")
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            listing = self.kube.request("GET", path)
        except KubeError as err:
            if err.status == 404:
                return
            raise
        for r in listing.get("resources") or []:
            if "/" in r.get("name", ""):
                continue
            self._cache[(api_version, r["kind"])] = Resource(
                group, version, r["name"], namespaced=bool(r.get("namespaced")))

    def resource(self, api_version: str, kind: str, *, wait: float = 15.0) -> Resource:
        deadline = time.monotonic() + wait
        while True:
            res = self._cache.get((api_version, kind))
            if res is not None:
                return res
            self._load(api_version)
            if (api_version, kind) in self._cache:
                continue
            if time.monotonic() > deadline:
                raise ManifestError(f"the server does not serve {kind} in {api_version}")
            time.sleep(0.2)


def load_objects(paths: Iterable[str]) -> list[tuple[str, Obj]]:
    """(file, object) for every document of every file, in apply order."""
    objs: list[tuple[str, Obj]] = []
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            try:
                docs = list(yaml.safe_load_all(fh))
            except yaml.YAMLError as err:
                raise ManifestError(f"{path}: invalid YAML: {err}") from None
        for doc in docs:
            if not doc:
                continue
            if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
                raise ManifestError(f"{path}: a document without apiVersion/kind")
            items = doc.get("items") if doc["kind"].endswith("List") else [doc]
            objs.extend((path, item) for item in items or [])

    def rank(entry: tuple[str, Obj]) -> int:
        kind = entry[1].get("kind", "")
        return ORDER.index(kind) if kind in ORDER else len(ORDER)

    return sorted(objs, key=rank)


def manifest_files(directory: str) -> list[str]:
    out = []
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        out += [os.path.join(root, f) for f in sorted(files) if f.endswith((".yaml", ".yml"))]
    return out


def last_applied(obj: Obj) -> Obj | None:
    """The manifest recorded on ``obj`` when it was last applied; None when there is none
    (or it is not a JSON object)."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED)
    try:
        found = json.loads(raw) if isinstance(raw, str) else None
    except (ValueError, RecursionError):  # anyone who may edit the object wrote it
        return None
    return found if isinstance(found, dict) else None


def apply_object(kube: Client, discovery: Discovery, manifest: Obj, *,
                 wait: float = 1.0) -> Obj:
    res = discovery.resource(manifest["apiVersion"], manifest["kind"], wait=wait)
    obj = copy.deepcopy(manifest)
    meta = obj.setdefault("metadata", {})
    if res.namespaced:
        meta.setdefault("namespace", "default")
    else:
        meta.pop("namespace", None)
    ns, name = meta.get("namespace"), meta["name"]
    annotations = meta.get("annotations") or {}
    annotations.pop(LAST_APPLIED, None)
    if not annotations:
        meta.pop("annotations", None)
    # the manifest as applied, without a record of itself (what kubectl records)
    record = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    meta["annotations"] = {**annotations, LAST_APPLIED: record}
    try:
        created: Obj = kube.request("POST", res.path(ns), body=obj)
        return created
    except KubeError as err:
        if err.status != 409:
            raise
    current: Obj = kube.request("GET", res.path(ns, name))
    patch = mergepatch.three_way(last_applied(current), obj, current)
    if not patch:
        return current
    patched: Obj = kube.request("PATCH", res.path(ns, name), body=patch, content_type=MERGE)
    return patched


def apply_manifests(kube: Client, root: str) -> list[str]:
    """Apply ``root``'s crds/, rbac/ and deploy/ in that order; returns what was applied."""
    discovery = Discovery(kube)
    applied = []
    crd_groups: set[str] = set()
    for sub in SUBDIRS:
        directory = os.path.join(root, sub)
        if not os.path.isdir(directory):
            continue
        for path, obj in load_objects(manifest_files(directory)):
            name = f"{obj['kind']}/{(obj.get('metadata') or {}).get('name')}"
            if obj["kind"] == "CustomResourceDefinition":
                crd_groups.add(str((obj.get("spec") or {}).get("group")))
            # Kinds of CRDs applied just now may take a moment to be served.
            group = obj["apiVersion"].rpartition("/")[0]
            try:
                apply_object(kube, discovery, obj,
                             wait=15.0 if group in crd_groups else 1.0)
            except (KubeError, ManifestError) as err:
                raise ManifestError(f"{path}: {name}: {err}") from err
            logger.info("applied %s from %s", name, path)
            applied.append(name)
    return applied


