"""kopf wiring of the CDI controllers: which events call which reconcile step.

Only this module imports kopf. Every handler is an event handler (no state kept on the
objects, no finalizers), and every reconcile step reads what it needs fresh, so a missed
or repeated event costs nothing; a resync thread revisits unfinished DataVolumes so that a
failed API call is retried without an event.
"""

from __future__ import annotations

import importlib.metadata
import logging
import threading
from typing import Any

import kopf

from cdi import cronsync, datasource, reconcile
from cdi.kube import cdi_namespace
from kubeclient import Client, KubeError, load_configuration
from kubeclient.resources import DATAIMPORTCRONS, DATASOURCES, DATAVOLUMES
from vocab import cdi as api

logger = logging.getLogger(__name__)

RESYNC_SECONDS = 10.0

_client: Client | None = None
_client_guard = threading.Lock()
_stop = threading.Event()


def client() -> Client:
    global _client
    with _client_guard:
        if _client is None:
            _client = Client(load_configuration())
        return _client


@kopf.on.startup()
def start(**_: Any) -> None:
    _stop.clear()
    try:
        reconcile.reconcile_config(client())
    except KubeError as err:
        logger.warning("CDIConfig not reconciled at startup: %s", err)
    threading.Thread(target=_resync, name="cdi-resync", daemon=True).start()


@kopf.on.cleanup()
def stop(**_: Any) -> None:
    _stop.set()


@kopf.on.event(api.GROUP, api.VERSION, "datavolumes")
def datavolume_event(event: Any, body: Any, name: str, namespace: str | None,
                     **_: Any) -> None:
    if namespace is None:  # namespaced kinds always have one
        return
    if event.get("type") != "DELETED":
        reconcile.reconcile_datavolume(client(), namespace, name)
    else:
        reconcile.delete_clone_source(client(), dict(body))
    cron = ((body.get("metadata") or {}).get("labels") or {}).get(api.CRON_LABEL)
    if cron:  # an import of a DataImportCron moved on
        _cron(namespace, str(cron))


@kopf.on.event(api.GROUP, api.VERSION, api.DATAIMPORTCRON_PLURAL)
def cron_event(event: Any, name: str, namespace: str | None, **_: Any) -> None:
    if namespace is None:
        return
    if event.get("type") == "DELETED":
        cronsync.cleanup_locked(client(), namespace, name)
    else:
        _cron(namespace, name)


def _cron(namespace: str, name: str) -> None:
    try:
        cronsync.reconcile_cron_locked(client(), namespace, name)
    except KubeError as err:
        logger.warning("cron %s/%s: %s", namespace, name, err)


Source = tuple[str, str, str]
"""(kind, namespace, name) a DataSource names (:func:`cdi.datasource.refers_to`)."""


@kopf.index(api.GROUP, api.VERSION, "datasources")
def data_sources_by_source(body: Any, name: str, namespace: str | None,
                           **_: Any) -> dict[Source, tuple[str, str]] | None:
    """Which DataSources name a claim or another DataSource, kept from the watch: a claim
    event finds its DataSources here instead of listing every DataSource again."""
    ref = datasource.refers_to(body)
    return None if ref is None or namespace is None else {ref: (namespace, name)}


@kopf.on.event("", "v1", "persistentvolumeclaims")
def claim_event(event: Any, body: Any, namespace: str | None, **kwargs: Any) -> None:
    if namespace is None:  # namespaced kinds always have one
        return
    owner = reconcile.datavolume_owner(dict(body))
    if owner is not None and event.get("type") != "DELETED":
        reconcile.reconcile_datavolume(client(), namespace, owner)
    name = str((body.get("metadata") or {}).get("name"))
    _data_sources_of(("PersistentVolumeClaim", namespace, name), kwargs)


@kopf.on.event(api.SNAPSHOT_API_GROUP, "v1", "volumesnapshots")
def snapshot_event(body: Any, namespace: str | None, **kwargs: Any) -> None:
    """A VolumeSnapshot came, changed (readyToUse) or went: the DataSources naming it
    look again."""
    if namespace is None:
        return
    name = str((body.get("metadata") or {}).get("name"))
    _data_sources_of((api.VOLUME_SNAPSHOT_KIND, namespace, name), kwargs)


@kopf.on.event(api.GROUP, api.VERSION, "datasources")
def data_source_event(event: Any, name: str, namespace: str | None, **kwargs: Any) -> None:
    if namespace is None:
        return
    if event.get("type") != "DELETED":
        reconcile.reconcile_data_source(client(), namespace, name)
    _data_sources_of(("DataSource", namespace, name), kwargs)


def _data_sources_of(source: Source, kwargs: dict[str, Any]) -> None:
    """A claim, a VolumeSnapshot or a DataSource came, changed or went: the DataSources
    naming it look again (one level: a DataSource may name another, not further). kopf
    hands the index to a handler as the keyword argument of its name."""
    index: kopf.Index[Source, tuple[str, str]] = kwargs["data_sources_by_source"]
    for namespace, name in list(index.get(source, ())):
        reconcile.reconcile_data_source(client(), namespace, name)


@kopf.on.event(api.GROUP, api.VERSION, "cdiconfigs")
def config_event(**_: Any) -> None:
    reconcile.reconcile_config(client())


@kopf.on.event("networking.k8s.io", "v1", "ingresses")
def ingress_event(namespace: str | None, **_: Any) -> None:
    """An Ingress of the CDI namespace may expose the upload proxy (uploadProxyURL)."""
    if namespace == cdi_namespace():
        reconcile.reconcile_config(client())


@kopf.on.event("storage.k8s.io", "v1", "storageclasses")
def storage_class_event(name: str, **_: Any) -> None:
    reconcile.reconcile_profile(client(), name)
    reconcile.reconcile_config(client())


@kopf.on.event(api.GROUP, api.VERSION, "storageprofiles")
def profile_event(event: Any, name: str, **_: Any) -> None:
    if event.get("type") != "DELETED":
        reconcile.reconcile_profile(client(), name)


def _version() -> str:
    try:
        return "rootdisk-" + importlib.metadata.version("rootdisk")
    except importlib.metadata.PackageNotFoundError:
        return "rootdisk"


def _resync() -> None:
    while not _stop.wait(RESYNC_SECONDS):
        try:
            reconcile.reconcile_cdi(client(), version=_version())
        except KubeError as err:
            logger.warning("resync: the CDI object's status: %s", err)
        try:
            for cron in client().list(DATAIMPORTCRONS):
                _cron(cron["metadata"]["namespace"], cron["metadata"]["name"])
            cronsync.sweep(client())
        except KubeError as err:
            logger.warning("resync: DataImportCrons: %s", err)
        try:
            for ds in client().list(DATASOURCES):
                reconcile.reconcile_data_source(client(), ds["metadata"]["namespace"],
                                                ds["metadata"]["name"])
        except KubeError as err:
            logger.warning("resync: DataSources: %s", err)
        try:
            clone_sources = reconcile.list_clone_sources(client())  # before the DataVolumes
            items = client().list(DATAVOLUMES)
            reconcile.sweep_clone_sources(client(), clone_sources=clone_sources,
                                          datavolumes=items)
        except KubeError as err:
            logger.warning("resync: cannot list DataVolumes or VolumeCloneSources: %s", err)
            continue
        for dv in items:
            if (dv.get("status") or {}).get("phase") in (api.SUCCEEDED, api.FAILED):
                continue
            try:
                reconcile.reconcile_datavolume(client(), dv["metadata"]["namespace"],
                                               dv["metadata"]["name"])
            except KubeError as err:
                logger.warning("resync of %s/%s failed: %s", dv["metadata"]["namespace"],
                               dv["metadata"]["name"], err)
