"""A DataImportCron's reconcile: observe, poll the registry when due, decide
(:mod:`cdi.importcron`, pure), apply. Also what a deleted cron leaves to clean up.

The digest is polled here, by the controller, with ``ociregistry`` (upstream polls a
``docker://`` source from a CronJob's pod that writes the same annotations); the
template's ``secretRef`` (keys ``accessKeyId``/``secretKey``) and ``certConfigMap`` are
read for it, and CDIConfig ``spec.insecureRegistries`` is honoured, as for an import.
A poll is bounded in time (:data:`POLL_DEADLINE`): it runs under the controller's one
cron lock (``cdi.handlers``), from a kopf handler's thread or the resync thread.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from cdi import importcron
from cdi.kube import COMPONENT
from cdi.render import pick_storage_class
from kubeclient import Client, KubeError
from kubeclient.resources import (
    CDICONFIGS,
    CONFIGMAPS,
    DATAIMPORTCRONS,
    DATASOURCES,
    DATAVOLUMES,
    PVCS,
    SECRETS,
    SNAPSHOTS,
    STORAGECLASSES,
    STORAGEPROFILES,
)
from ociregistry.client import (
    DEADLINE_READS,
    Access,
    Credentials,
    RegistryError,
    resolve_digest,
)
from ociregistry.reference import ReferenceError as BadReference
from ociregistry.reference import parse_docker_url
from pki.bundle import open_bundle
from vocab import cdi as api
from vocab import sources

logger = logging.getLogger(__name__)
Obj = dict[str, Any]
Resolver = Callable[[str, Access], str]
"""``resolve(docker_url, access)``: the digest the url names now."""
POLL_TIMEOUT = 30.0
"""requests' timeout of a poll: for connecting, and for each read."""
POLL_DEADLINE = DEADLINE_READS * POLL_TIMEOUT
"""The longest a poll may take, every request of it included: while it lasts, the cron's
other reconciles wait (:func:`reconcile_cron_locked`), and so does the resync thread (the
DataVolumes' and DataSources' resyncs behind it), and the kopf handlers of the cron and
of its DataVolumes, each holding one of kopf's worker threads. Past it the poll fails as
any unreachable registry does (Event ``DigestPollFailed``, polled again after
``importcron.POLL_RETRY``)."""


def _resolve(url: str, access: Access) -> str:
    return resolve_digest(parse_docker_url(url), access)


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# -- one reconcile of a cron at a time ----------------------------------------------------

_locks: dict[tuple[str, str], threading.Lock] = {}
_locks_guard = threading.Lock()


@contextlib.contextmanager
def _alone(namespace: str, name: str) -> Iterator[None]:
    with _locks_guard:
        lock = _locks.setdefault((namespace, name), threading.Lock())
    with lock:
        yield


def reconcile_cron_locked(client: Client, namespace: str, name: str) -> None:
    """:func:`reconcile_cron`, one at a time for a cron (its events and the resync would
    otherwise race to create the same import), while different crons run side by side:
    a cron whose registry holds its digest poll up to the deadline holds up no other
    cron, nor the handler threads of their imports' events."""
    with _alone(namespace, name):
        reconcile_cron(client, namespace, name)


def cleanup_locked(client: Client, namespace: str, name: str) -> None:
    """:func:`cleanup` of a deleted cron, after a reconcile of it under way; its lock goes
    with it (a lock per cron that exists, not per cron that ever did)."""
    with _alone(namespace, name):
        cleanup(client, namespace, name)
    with _locks_guard:
        _locks.pop((namespace, name), None)


def reconcile_cron(client: Client, namespace: str, name: str, *,
                   now: Callable[[], dt.datetime] = _utcnow,
                   resolve: Resolver = _resolve) -> None:
    cron = client.get_or_none(DATAIMPORTCRONS, name, namespace)
    if cron is None or (cron.get("metadata") or {}).get("deletionTimestamp"):
        return
    spec = cron.get("spec") or {}
    managed = str(spec.get("managedDataSource") or "")
    data_source = client.get_or_none(DATASOURCES, managed, namespace) if managed else None
    label = importcron.labelled_for_other(data_source, cron)
    if label is not None and importcron.managed_by_other(
            data_source, client.get_or_none(DATAIMPORTCRONS, label, namespace)):
        client.event(cron, type_="Warning", reason="ErrDataSourceAlreadyManaged",
                     message=f"DataSource {managed} is already managed by DataImportCron"
                     f" {label}", component=COMPONENT)
        return
    when = now()
    poll = _poll(client, cron, resolve) if importcron.should_poll(cron, when) else None
    imports = (cron.get("status") or {}).get("currentImports") or []
    current = str(imports[0].get(importcron.DV_NAME_KEY)) if imports else ""
    desired = (poll.digest if poll is not None and poll.digest else
               ((cron.get("metadata") or {}).get("annotations") or {}).get(
                   api.SOURCE_DESIRED_DIGEST) or "")
    existing = None
    if desired:
        with contextlib.suppress(ValueError):
            candidate = importcron.dv_name(managed, desired)
            if candidate != current:  # a snapshot first, then a claim, as upstream
                existing = client.get_or_none(SNAPSHOTS, candidate, namespace) or \
                    client.get_or_none(PVCS, candidate, namespace)
    profile = _profile(client, cron)
    status = (profile or {}).get("status") or {}
    plan = importcron.decide(importcron.Observed(
        cron=cron, now=when,
        dv=client.get_or_none(DATAVOLUMES, current, namespace) if current else None,
        pvc=client.get_or_none(PVCS, current, namespace) if current else None,
        existing=existing, data_source=data_source,
        claims=_labelled(client, PVCS, namespace, name), poll=poll,
        format=str(status.get("dataImportCronSourceFormat") or importcron.PVC_FORMAT),
        snapshot=client.get_or_none(SNAPSHOTS, current, namespace) if current else None,
        snapshots=_labelled(client, SNAPSHOTS, namespace, name),
        snapshot_class=((profile or {}).get("metadata") or {}).get("annotations", {}).get(
            api.SNAPSHOT_CLASS_FOR_CRON) or status.get("snapshotClass") or None))
    _apply(client, cron, plan)


def _labelled(client: Client, kind: Any, namespace: str, cron: str) -> list[Obj]:
    return [o for o in client.list(kind, namespace)
            if ((o.get("metadata") or {}).get("labels") or {}).get(api.CRON_LABEL) == cron]


def _profile(client: Client, cron: Obj) -> Obj | None:
    """The StorageProfile of the class the template's claims get (named, else the
    default, virt first): its ``dataImportCronSourceFormat`` and snapshot class."""
    spec = (cron["spec"].get("template") or {}).get("spec") or {}
    target = spec.get("storage") or spec.get("pvc") or {}
    picked = pick_storage_class(requested=target.get("storageClassName"),
                                classes=client.list(STORAGECLASSES),
                                content_type=str(spec.get("contentType") or "kubevirt"))
    if picked is None:
        return None
    return client.get_or_none(STORAGEPROFILES, str(picked["metadata"]["name"]))


def _apply(client: Client, cron: Obj, plan: importcron.Plan) -> None:
    meta = cron["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    for type_, reason, message in plan.events:
        client.event(cron, type_=type_, reason=reason, message=message,
                     component=COMPONENT)
    if plan.delete_dv is not None:
        logger.info("cron %s/%s: DataVolume %s failed; importing again", namespace, name,
                    plan.delete_dv)
        client.delete(DATAVOLUMES, plan.delete_dv, namespace)
    if plan.create_dv is not None:
        logger.info("cron %s/%s: importing %s", namespace, name,
                    plan.create_dv["spec"]["source"][sources.REGISTRY]["url"])
        client.create_if_absent(DATAVOLUMES, plan.create_dv)
    for kind, touch in ((PVCS, plan.touch_claim), (SNAPSHOTS, plan.touch_snapshot)):
        if touch is not None:
            kept, labels, annotations = touch
            with contextlib.suppress(KubeError):
                client.patch(kind, kept, {"metadata": {"labels": labels,
                                                       "annotations": annotations}}, namespace)
    if plan.create_snapshot is not None:
        logger.info("cron %s/%s: snapshot of %s", namespace, name,
                    plan.create_snapshot["metadata"]["name"])
        client.create_if_absent(SNAPSHOTS, plan.create_snapshot)
    if plan.delete_snapshot is not None:
        client.delete(SNAPSHOTS, plan.delete_snapshot, namespace)
    for old in [*plan.collect, *([plan.delete_import] if plan.delete_import else [])]:
        logger.info("cron %s/%s: deleting the import %s", namespace, name, old)
        if client.get_or_none(DATAVOLUMES, old, namespace) is not None:
            client.delete(DATAVOLUMES, old, namespace)
        else:
            client.delete(PVCS, old, namespace)
    for old in plan.collect_snapshots:
        logger.info("cron %s/%s: garbage-collecting the snapshot %s", namespace, name, old)
        client.delete(SNAPSHOTS, old, namespace)
    if plan.create_data_source is not None:
        client.create_if_absent(DATASOURCES, plan.create_data_source)
    if plan.data_source_source is not None:
        source = {"pvc": None, "snapshot": None, "dataSource": None, **plan.data_source_source}
        client.patch(DATASOURCES, str(cron["spec"]["managedDataSource"]),
                     {"spec": {"source": source}}, namespace)
    if plan.annotations:
        client.patch(DATAIMPORTCRONS, name, {"metadata": {"annotations": plan.annotations}},
                     namespace)
    if plan.status is not None:  # no status subresource, as upstream's CRD
        try:
            client.patch(DATAIMPORTCRONS, name, {"status": plan.status}, namespace)
        except KubeError as err:
            if err.status not in (404, 409):
                raise


# -- polling ---------------------------------------------------------------------------------

def _poll(client: Client, cron: Obj, resolve: Resolver) -> importcron.Poll:
    url = importcron.registry_url(cron)
    assert url is not None  # should_poll said so
    namespace = cron["metadata"]["namespace"]
    registry = ((cron["spec"]["template"].get("spec") or {}).get("source") or {}).get(
        sources.REGISTRY) or {}
    try:
        with _access(client, namespace, url, registry) as access:
            digest = resolve(url, access)
    except (RegistryError, BadReference, OSError, ValueError) as err:
        logger.warning("cron %s/%s: polling %s failed: %s", namespace,
                       cron["metadata"]["name"], url, err)
        return importcron.Poll(error=f"polling {url}: {err}")
    return importcron.Poll(digest=digest)


@contextlib.contextmanager
def _access(client: Client, namespace: str, url: str,
            registry: Mapping[str, Any]) -> Iterator[Access]:
    """The registry access a DataVolume of the template would have: its Secret's
    credentials, its ConfigMap's CAs (added to the system roots, in a 0600 file removed
    afterwards), and whether CDIConfig lists the host as insecure."""
    credentials = None
    secret_name = registry.get("secretRef")
    if secret_name:
        secret = client.get_or_none(SECRETS, str(secret_name), namespace)
        if secret is None:
            raise ValueError(f"Secret {namespace}/{secret_name} not found")
        data = secret.get("data") or {}
        try:
            user = base64.b64decode(data.get("accessKeyId") or "").decode()
            password = base64.b64decode(data.get("secretKey") or "").decode()
        except ValueError:
            raise ValueError(f"Secret {namespace}/{secret_name}: not base64 text") from None
        if user and password:
            credentials = Credentials(user, password)
    config = client.get_or_none(CDICONFIGS, api.CONFIG_NAME) or {}
    insecure_hosts = (config.get("spec") or {}).get("insecureRegistries") or []
    insecure = urlsplit(url).netloc in insecure_hosts
    cm_name = registry.get("certConfigMap")
    if not cm_name or insecure:
        yield Access(credentials=credentials, insecure=insecure, timeout=POLL_TIMEOUT,
                     deadline=POLL_DEADLINE)
        return
    configmap = client.get_or_none(CONFIGMAPS, str(cm_name), namespace)
    if configmap is None:
        raise ValueError(f"ConfigMap {namespace}/{cm_name} not found")
    with open_bundle(str(v).encode() for v in (configmap.get("data") or {}).values()) \
            as bundle:
        yield Access(credentials=credentials, ca_file=bundle.name, timeout=POLL_TIMEOUT,
                     deadline=POLL_DEADLINE)


# -- deletion ------------------------------------------------------------------------------

CLEANED = ((DATASOURCES, "DataSource"), (DATAVOLUMES, "DataVolume"),
           (PVCS, "PersistentVolumeClaim"), (SNAPSHOTS, "VolumeSnapshot"))


def cleanup(client: Client, namespace: str, name: str) -> None:
    """Upstream's ``cleanup``: a deleted cron with ``retentionPolicy: None`` takes the
    DataSources, DataVolumes and claims labelled for it and for clean-up."""
    for kind, what in CLEANED:
        for obj in client.list(kind, namespace):
            labels = (obj.get("metadata") or {}).get("labels") or {}
            if labels.get(api.CRON_LABEL) == name and labels.get(api.CRON_CLEANUP_LABEL) == "true":
                logger.info("cron %s/%s deleted: deleting %s %s", namespace, name, what,
                            obj["metadata"]["name"])
                client.delete(kind, obj["metadata"]["name"], namespace)


def sweep(client: Client) -> None:
    """Clean up after crons deleted while no controller ran (no finalizer is used)."""
    alive = {(c["metadata"]["namespace"], c["metadata"]["name"])
             for c in client.list(DATAIMPORTCRONS)}
    gone: set[tuple[str, str]] = set()
    for kind, _ in CLEANED:
        for obj in client.list(kind):
            meta = obj.get("metadata") or {}
            labels = meta.get("labels") or {}
            if labels.get(api.CRON_CLEANUP_LABEL) == "true" and labels.get(api.CRON_LABEL):
                key = (str(meta.get("namespace")), str(labels[api.CRON_LABEL]))
                if key not in alive:
                    gone.add(key)
    for namespace, name in gone:
        cleanup(client, namespace, name)
