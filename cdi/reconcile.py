"""The CDI controllers' reconcile steps: read, decide (pure modules), write.

Each step reads what it needs fresh from the API, so it can run any number of times, in
any order, after an operator restart, or on two replicas one after the other: objects
are created under fixed names (a 409 means "already there"), and the DataVolume's status
is written with the resourceVersion it was computed from, so a stale decision is refused
by the API server instead of overwriting a newer one. Events announce a phase change only
after the status carrying that phase was written, so they are never doubled.
"""

from __future__ import annotations

import datetime
import logging
import threading
from collections.abc import Mapping
from typing import Any

from cdi import (
    authorize,
    cdi_status,
    clone,
    config,
    datasource,
    datavolume,
    profiles,
    snapshot_clone,
    validate,
)
from cdi.kube import COMPONENT, cdi_namespace
from cdi.render import pick_storage_class
from cdi.status import Waiting
from kubeclient import Client, KubeError, mergepatch
from kubeclient.resources import (
    CDICONFIGS,
    CDIS,
    CLONE_SOURCES,
    DATASOURCES,
    DATAVOLUMES,
    DEPLOYMENTS,
    IMPORT_SOURCES,
    INGRESSES,
    PVCS,
    SNAPSHOT_CONTENTS,
    SNAPSHOTS,
    STORAGECLASSES,
    STORAGEPROFILES,
    UPLOAD_SOURCES,
)
from vocab import cdi as api

logger = logging.getLogger(__name__)

Obj = dict[str, Any]

_locks: dict[tuple[str, str], threading.Lock] = {}
_locks_guard = threading.Lock()


def _lock(namespace: str, name: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault((namespace, name), threading.Lock())


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def owned_by(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    uid = owner["metadata"].get("uid")
    return any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or [])


def datavolume_owner(obj: Mapping[str, Any]) -> str | None:
    """The name of the DataVolume controlling ``obj``, if one does."""
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == "DataVolume" and ref.get("apiVersion", "").startswith(api.GROUP):
            return str(ref["name"])
    return None


def reconcile_datavolume(client: Client, namespace: str, name: str) -> str | None:
    """Bring one DataVolume a step forward; returns its phase (None when it is gone)."""
    with _lock(namespace, name):
        return _reconcile_datavolume(client, namespace, name)


def _reconcile_datavolume(client: Client, namespace: str, name: str) -> str | None:
    dv = client.get_or_none(DATAVOLUMES, name, namespace)
    if dv is None or dv["metadata"].get("deletionTimestamp"):
        return None
    previous = (dv.get("status") or {}).get("phase")
    claim = client.get_or_none(PVCS, name, namespace)
    failure: tuple[str, str] | None = None
    if claim is not None and not owned_by(claim, dv):
        gates = config.feature_gates(client.get_or_none(CDICONFIGS, api.CONFIG_NAME))
        if validate.adoption_allowed(claim.get("metadata") or {}, dv,
                                     adoption_gate=config.CLAIM_ADOPTION_GATE in gates):
            claim = _adopt(client, claim, dv)
        else:
            failure = datavolume.not_managed(name)
            claim = None
    storage_class: Mapping[str, Any] | None = None
    if claim is None and failure is None and previous not in (api.SUCCEEDED, api.FAILED):
        claim, storage_class, failure = _create_target(client, dv)
    if claim is not None and storage_class is None:
        sc_name = (claim.get("spec") or {}).get("storageClassName")
        storage_class = client.get_or_none(STORAGECLASSES, sc_name) if sc_name else None
    plan = datavolume.decide(dv=dv, claim=claim, storage_class=storage_class,
                             failure=failure, now=now())
    return _apply(client, dv, plan)


def _apply(client: Client, dv: Obj, plan: datavolume.Plan) -> str | None:
    """Write what :func:`cdi.datavolume.decide` planned; the DataVolume's phase after it
    (the one it had when its status changed meanwhile: nothing more is done then)."""
    namespace, name = dv["metadata"]["namespace"], dv["metadata"]["name"]
    previous = (dv.get("status") or {}).get("phase")
    if plan.status is not None:
        try:
            client.patch(DATAVOLUMES, name, {
                "metadata": {"resourceVersion": dv["metadata"]["resourceVersion"]},
                "status": plan.status}, namespace, subresource="status")
        except KubeError as err:
            if err.status in (404, 409):
                logger.debug("datavolume %s/%s changed meanwhile (%s)", namespace, name, err)
                return previous
            raise
        for event in plan.events:
            client.event(dv, type_=event.type, reason=event.reason, message=event.message,
                         component=COMPONENT)
        if plan.phase != previous:
            logger.info("datavolume %s/%s: %s -> %s", namespace, name, previous, plan.phase)
    if plan.delete_import_source is not None:
        client.delete(IMPORT_SOURCES, plan.delete_import_source, namespace)
    if plan.delete_upload_source is not None:
        client.delete(UPLOAD_SOURCES, plan.delete_upload_source, namespace)
    if plan.delete_clone_source:
        delete_clone_source(client, dv)
    return plan.phase


def delete_clone_source(client: Client, dv: Mapping[str, Any]) -> None:
    """Remove the DataVolume's VolumeCloneSource wherever it is (in the source namespace
    no owner reference reaches it): found by the label naming the DataVolume's UID."""
    uid = dv["metadata"]["uid"]
    found = client.request("GET", CLONE_SOURCES.path(), query={
        "labelSelector": f"{api.CLONE_FOR_DV_LABEL}={uid}"}) or {}
    for vcs in found.get("items") or []:
        if vcs["metadata"]["name"] == clone.clone_source_name(uid):
            client.delete(CLONE_SOURCES, vcs["metadata"]["name"], vcs["metadata"]["namespace"])


def list_clone_sources(client: Client) -> list[Obj]:
    """Every VolumeCloneSource this controller made (its label), in all namespaces."""
    found = client.request("GET", CLONE_SOURCES.path(), query={
        "labelSelector": api.CLONE_FOR_DV_LABEL}) or {}
    return list(found.get("items") or [])


def sweep_clone_sources(client: Client, *, clone_sources: list[Obj],
                        datavolumes: list[Obj]) -> None:
    """Delete the VolumeCloneSources whose DataVolume is gone (``clone_sources`` listed
    before ``datavolumes``; see :func:`cdi.clone.orphaned_clone_sources`)."""
    uids = {str(dv["metadata"]["uid"]) for dv in datavolumes}
    for namespace, name in clone.orphaned_clone_sources(clone_sources=clone_sources,
                                                        datavolume_uids=uids):
        logger.info("deleting VolumeCloneSource %s/%s: its DataVolume is gone", namespace, name)
        client.delete(CLONE_SOURCES, name, namespace)


def clone_target(client: Client, dv: Mapping[str, Any]) -> clone.SourceRef | tuple[str, str] | None:
    """:func:`cdi.clone.resolve_source`, reading DataSources from the API."""
    return clone.resolve_source(dv, lambda ns, name: client.get_or_none(DATASOURCES, name, ns))


def _adopt(client: Client, claim: Obj, dv: Obj) -> Obj:
    logger.info("datavolume %s/%s adopts its existing claim", dv["metadata"]["namespace"],
                dv["metadata"]["name"])
    return client.patch(PVCS, claim["metadata"]["name"], datavolume.adoption_patch(claim, dv),
                        claim["metadata"]["namespace"])


def _create_target(
    client: Client, dv: Obj,
) -> tuple[Obj | None, Mapping[str, Any] | None, tuple[str, str] | None]:
    spec = dv.get("spec") or {}
    wanted = spec.get("pvc") or spec.get("storage") or {}
    classes = client.list(STORAGECLASSES)
    storage_class = pick_storage_class(requested=wanted.get("storageClassName"),
                                       classes=classes,
                                       content_type=spec.get("contentType") or "kubevirt")
    profile = None
    if storage_class is not None:
        sc_name = storage_class["metadata"]["name"]
        profile = client.get_or_none(STORAGEPROFILES, sc_name)
        if profile is None or not profile.get("status"):
            # the StorageClass event may not have been handled yet: do it now
            profile = reconcile_profile(client, sc_name)
    cdi_config = client.get_or_none(CDICONFIGS, api.CONFIG_NAME)
    config_status = (cdi_config or {}).get("status")
    if not config_status:
        config_status = config.compute_status(spec=(cdi_config or {}).get("spec"),
                                              storage_classes=classes).status
    if spec.get("pvc") is not None:
        # a verbatim claim without a class gets the API server's default class, which is
        # Kubernetes' default, not the virt default
        storage_class = pick_storage_class(requested=wanted.get("storageClassName"),
                                           classes=classes, content_type="archive")
    clone_from = None
    source_ref = clone_target(client, dv)
    if isinstance(source_ref, tuple):
        return None, storage_class, source_ref
    if source_ref is not None:
        found = _clone_source(client, dv, source_ref, config_status)
        if not isinstance(found, clone.Source):
            return None, storage_class, found
        clone_from = (source_ref, found)
    target = datavolume.target(dv=dv, storage_class=storage_class, profile=profile,
                               config_status=config_status, clone_from=clone_from)
    if isinstance(target, tuple):
        return None, None, target
    ns = dv["metadata"]["namespace"]
    if target.import_source is not None:
        client.create_if_absent(
            UPLOAD_SOURCES if target.import_source["kind"] == api.UPLOAD_SOURCE_KIND
            else IMPORT_SOURCES, target.import_source)
    if target.clone_source is not None:
        client.create_if_absent(CLONE_SOURCES, target.clone_source)
    created = client.create_if_absent(PVCS, target.claim)
    if created is not None:
        logger.info("datavolume %s/%s: created claim (%s)", ns, dv["metadata"]["name"],
                    (created["spec"].get("resources") or {}).get("requests"))
    claim = created or client.get_or_none(PVCS, dv["metadata"]["name"], ns)
    if claim is not None and not owned_by(claim, dv):
        return None, storage_class, datavolume.not_managed(dv["metadata"]["name"])
    return claim, storage_class, None


def _clone_source(client: Client, dv: Obj, ref: clone.SourceRef,
                  config_status: Mapping[str, Any] | None,
                  ) -> clone.Source | tuple[str, str]:
    """The source claim of a clone, after the authorization check for another namespace
    (nothing of the source is read before it passes)."""
    if ref.namespace != dv["metadata"]["namespace"]:
        who = authorize.requester(dv)
        ok = who is not None and authorize.allowed(
            ask=client.allowed, who=who, namespace=ref.namespace, name=ref.name,
            snapshot=ref.kind == clone.SNAPSHOT)
        if not ok:
            return ("CloneUnauthorized",
                    authorize.denied_message(who=who, namespace=ref.namespace))
    if ref.kind == clone.SNAPSHOT:
        return _snapshot_source(client, dv, ref, config_status)
    claim = client.get_or_none(PVCS, ref.name, ref.namespace)
    if claim is None:
        return ("CloneSourceNotFound",
                f"clone source claim {ref.namespace}/{ref.name} not found")
    mode = clone.volume_mode(claim)
    overhead = config.overhead_for(status=config_status,
                                   storage_class=(claim.get("spec") or {}).get(
                                       "storageClassName"), volume_mode=mode)
    return clone.Source(claim=claim, overhead=overhead)


def _snapshot_source(client: Client, dv: Obj, ref: clone.SourceRef,
                     config_status: Mapping[str, Any] | None,
                     ) -> clone.Source | tuple[str, str]:
    """The VolumeSnapshot of a clone as its source (see :mod:`cdi.snapshot_clone`), or
    why the DataVolume waits for it."""
    snapshot = client.get_or_none(SNAPSHOTS, ref.name, ref.namespace)
    if snapshot is None:
        return Waiting(api.CLONE_WITHOUT_SOURCE, snapshot_clone.without_source(ref.name))
    problem = snapshot_clone.problem(snapshot, dv)
    if problem is not None:
        return Waiting(api.CLONE_VALIDATION_FAILED, snapshot_clone.validation_failed(problem))
    content_name = (snapshot.get("status") or {}).get("boundVolumeSnapshotContentName")
    content = client.get_or_none(SNAPSHOT_CONTENTS, str(content_name)) if content_name else None
    mode = snapshot_clone.source_volume_mode(content)
    overhead = config.overhead_for(status=config_status, storage_class=None, volume_mode=mode)
    return snapshot_clone.as_source(snapshot, content, overhead)


def reconcile_data_source(client: Client, namespace: str, name: str) -> None:
    """Keep a DataSource's Ready condition in step with its source."""
    ds = client.get_or_none(DATASOURCES, name, namespace)
    if ds is None:
        return
    kinds = {"PersistentVolumeClaim": PVCS, "DataVolume": DATAVOLUMES,
             "DataSource": DATASOURCES, "VolumeSnapshot": SNAPSHOTS}
    condition = datasource.ready(
        data_source=ds, lookup=lambda kind, ns, n: client.get_or_none(kinds[kind], n, ns))
    new = datasource.status_patch(data_source=ds, condition=condition, now=now())
    if new is None:
        return
    try:
        client.patch(DATASOURCES, name, {
            "metadata": {"resourceVersion": ds["metadata"]["resourceVersion"]},
            "status": new}, namespace, subresource="status")
    except KubeError as err:
        if err.status not in (404, 409):
            raise
        return
    logger.info("datasource %s/%s: Ready %s (%s)", namespace, name, condition[0],
                condition[1])


def reconcile_config(client: Client) -> Obj:
    """Create the CDIConfig ``config`` if missing and write its effective status."""
    cdi_config = client.get_or_none(CDICONFIGS, api.CONFIG_NAME)
    if cdi_config is None:
        client.create_if_absent(CDICONFIGS, {"apiVersion": api.API_VERSION, "kind": "CDIConfig",
                                   "metadata": {"name": api.CONFIG_NAME}, "spec": {}})
        cdi_config = client.get_or_none(CDICONFIGS, api.CONFIG_NAME)
        assert cdi_config is not None
    try:
        ingresses = client.list(INGRESSES, cdi_namespace())
    except KubeError as err:  # an older role without ingresses: the URL stays unknown
        logger.debug("ingresses not listed: %s", err)
        ingresses = []
    result = config.compute_status(spec=cdi_config.get("spec"),
                                   storage_classes=client.list(STORAGECLASSES),
                                   ingresses=ingresses)
    stored = cdi_config.get("status") or {}
    old = {k: v for k, v in stored.items() if k in result.status}  # what this writes
    new = {k: v for k, v in result.status.items() if v is not None}  # None: absent
    changes = mergepatch.diff(old, new)  # keys gone from nested maps are removed too
    if changes:
        client.patch(CDICONFIGS, api.CONFIG_NAME, {"status": changes},
                     subresource="status")
        for problem in result.problems:
            logger.warning("CDIConfig: %s", problem)
            client.event(cdi_config, type_="Warning", reason="InvalidConfiguration",
                         message=problem, component=COMPONENT)
    return {**{k: v for k, v in stored.items() if k not in result.status}, **new}


def reconcile_cdi(client: Client, *, version: str, at: str | None = None) -> None:
    """Write the ``CDI`` object's status (``cdi.cdi_status``) from the install's
    Deployments in the CDI namespace, when it changed. No CDI object: nothing to do."""
    cdi = client.get_or_none(CDIS, cdi_status.NAME)
    if cdi is None:
        return
    ns = cdi_namespace()
    deployments = [client.get_or_none(DEPLOYMENTS, name, ns) for name in cdi_status.DEPLOYMENTS]
    status = cdi_status.desired_status(cdi, deployments, version=version,
                                       now=at or now())
    if status == (cdi.get("status") or {}):
        return
    try:
        client.request("PUT", CDIS.path(None, cdi_status.NAME, "status"),
                       body={**cdi, "status": status})
    except KubeError as err:
        if err.status not in (404, 409):  # gone, or changed: the next pass writes it
            raise


def reconcile_profile(client: Client, name: str) -> Obj | None:
    """Keep the StorageProfile of StorageClass ``name`` (created, status, minimum size)."""
    storage_class = client.get_or_none(STORAGECLASSES, name)
    if storage_class is None:
        client.delete(STORAGEPROFILES, name)
        return None
    profile = client.get_or_none(STORAGEPROFILES, name)
    if profile is None:
        client.create_if_absent(STORAGEPROFILES, {
            "apiVersion": api.API_VERSION, "kind": "StorageProfile",
            "metadata": {"name": name, "labels": {api.APP_LABEL: api.APP_LABEL_VALUE},
                         "ownerReferences": [{
                             "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                             "name": name, "uid": storage_class["metadata"]["uid"]}]},
            "spec": {}})
        profile = client.get_or_none(STORAGEPROFILES, name)
        if profile is None:
            return None
    status = profiles.compute_status(storage_class=storage_class, spec=profile.get("spec"))
    minimum = profiles.minimum_size_annotation(
        storage_class=storage_class, annotations=profile["metadata"].get("annotations") or {})
    if minimum is not None:
        profile = client.patch(STORAGEPROFILES, name, {
            "metadata": {"annotations": {api.MINIMUM_PVC_SIZE: minimum}}})
    if profile.get("status") != status:
        profile = client.patch(STORAGEPROFILES, name, {"status": status}, subresource="status")
    return profile
