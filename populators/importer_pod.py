"""The importer pod for PVC', rendered as upstream CDI renders it (pure).

Same env variables (the importer reads them in ``importer/config.py``), same volume
names and paths (``/data`` or the block device ``/dev/cdi-block-volume``, the CA bundle
at ``/certs``, the Secrets of ``secretExtraHeaders`` at ``/extraheaders/<i>``), the
metrics port, the termination message, ``restartPolicy: OnFailure``
and upstream's restricted pod security (uid 107, all capabilities dropped,
RuntimeDefault seccomp), so the pod runs in a namespace that enforces the ``restricted``
Pod Security Standard. Credentials reach the pod only through ``secretKeyRef``: the
operator never reads the Secret, and its values are never in the pod spec.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pki import rotation
from populators import names
from populators.cdiconfig import CdiConfig
from populators.import_source import ImportSource, registry_host
from vocab import cdi as api
from vocab import podenv, sources

DATA_VOLUME = "cdi-data-vol"
CERT_VOLUME = "cdi-cert-vol"
NODE_PULL_VOLUME = "registry-image"
NODE_PULL_DIR = "/var/run/cdi/registry-image"
"""``pullMethod: node``: the image, mounted by the node (an image volume), read there."""
DATA_DIR = "/data"
BLOCK_DEVICE = "/dev/cdi-block-volume"
CERT_DIR = "/certs"
SECRET_HEADERS_VOLUME = "cdi-secret-extra-headers-vol-{}"  # noqa: S105 - a name, no secret
SECRET_HEADERS_DIR = podenv.SECRET_HEADERS_PATH
METRICS_PORT = podenv.DEFAULT_METRICS_PORT
TERMINATION_LOG = podenv.TERMINATION_LOG_PATH
QEMU_UID = 107
"""virt-launcher's qemu user: the disk image must be its to open."""


@dataclass(frozen=True)
class Settings:
    """Operator-level settings for the pods it starts."""

    image: str = "rootdisk/importer"
    pull_policy: str = "IfNotPresent"
    extra_env: tuple[tuple[str, str], ...] = field(default=())
    """Variables given to every importer (operator tuning such as the importer's
    in-pod retry count); never credentials."""
    upload_cert_lifetime: float = 24 * 3600.0
    """Seconds an upload server's certificate (and the proxy's client certificate) lasts;
    a server pod is replaced after half (``UPLOAD_SERVER_CERT_LIFETIME``; upstream's 24 h)."""
    upload_ca_lifetime: float = 48 * 3600.0
    """Seconds the upload CA lasts; the next one takes over after half
    (``UPLOAD_CA_CERT_LIFETIME``; upstream's 48 h; at least twice the certificates')."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """From the operator's environment: ``IMPORTER_IMAGE``, ``IMPORTER_PULL_POLICY``,
        and the importer's own tuning variables passed on as they are."""
        extra = tuple((k, env[k]) for k in PASSED_ON if env.get(k))
        ca, leaf = rotation.lifetimes_from_env(env, ca_var="UPLOAD_CA_CERT_LIFETIME",
                                               leaf_var="UPLOAD_SERVER_CERT_LIFETIME")
        return cls(image=env.get("IMPORTER_IMAGE") or cls.image,
                   pull_policy=env.get("IMPORTER_PULL_POLICY") or cls.pull_policy,
                   extra_env=extra, upload_cert_lifetime=leaf.total_seconds(),
                   upload_ca_lifetime=ca.total_seconds())


PASSED_ON = (podenv.RETRY_ATTEMPTS, podenv.RETRY_DELAY)
"""The importer's in-pod retry tuning (``importer/config.py``), set on the operator."""


def restricted_container_security() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "runAsUser": QEMU_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


@dataclass(frozen=True)
class Plumbing:
    """What a source's pod needs beyond the shared fields' plumbing."""

    env: Mapping[str, str] = field(default_factory=dict)
    """Values of the source's declared options (``vocab.sources.Option.variable``)."""
    insecure_tls: bool = False
    volumes: tuple[dict[str, Any], ...] = ()
    mounts: tuple[dict[str, Any], ...] = ()


def _registry(source: ImportSource, config: CdiConfig) -> Plumbing:
    """As upstream: TLS unverified when the url's ``host:port`` is in CDIConfig's
    insecureRegistries; ``pullMethod: node``: the node's runtime pulls the image (here,
    the kubelet's image store) and the importer reads its /disk file from the mount."""
    insecure = registry_host(source.url) in config.insecure_registries
    if source.option("pullMethod") != "node":
        return Plumbing(insecure_tls=insecure)
    return Plumbing(
        env={sources.REGISTRY_IMAGE_DIR: NODE_PULL_DIR}, insecure_tls=insecure,
        volumes=({"name": NODE_PULL_VOLUME, "image": {
            "reference": source.url.removeprefix("docker://"), "pullPolicy": "IfNotPresent"}},),
        mounts=({"name": NODE_PULL_VOLUME, "mountPath": NODE_PULL_DIR, "readOnly": True},))


PLUMBING: Mapping[str, Callable[[ImportSource, CdiConfig], Plumbing]] = {
    sources.REGISTRY: _registry,
}
"""The sources whose pod needs more than their declaration says (``vocab.sources``)."""


def plumbing(source: ImportSource, config: CdiConfig) -> Plumbing:
    extra = PLUMBING.get(source.kind)
    return extra(source, config) if extra else Plumbing()


def _env(*, source: ImportSource, prime: Mapping[str, Any], target_uid: str,
         config: CdiConfig, block: bool, settings: Settings,
         extra: Plumbing) -> list[dict[str, Any]]:
    spec = prime.get("spec") or {}
    size = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "")
    options = tuple(
        (o.variable, source.option(o.field) if o.field else extra.env.get(o.variable, ""))
        for o in source.declaration.options if o.variable)
    env: list[dict[str, Any]] = list(podenv.ImportEnv(
        target=podenv.TargetEnv(
            image_size=str(size), owner_uid=target_uid, preallocation=source.preallocation,
            filesystem_overhead=config.overhead(storage_class=spec.get("storageClassName"),
                                                block=block)),
        source=source.kind, endpoint=source.url, content_type=source.content_type,
        insecure_tls=source.insecure_tls or extra.insecure_tls,
        cert_dir=CERT_DIR if source.cert_configmap else "",
        checksum=source.checksum or "", extra_headers=tuple(source.extra_headers),
        options=options,
    ).render())
    if source.secret:
        for var, key in podenv.CREDENTIAL_KEYS:
            env.append({"name": var, "valueFrom": {"secretKeyRef": {
                "name": source.secret, "key": key}}})
    # The importer binds its metrics server to its own address when it knows it.
    env.append({"name": podenv.POD_IP,
                "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    taken = {e["name"] for e in env}
    env.extend({"name": k, "value": v} for k, v in settings.extra_env if k not in taken)
    return env


def render(*, source: ImportSource, prime: Mapping[str, Any], target: Mapping[str, Any],
           config: CdiConfig, settings: Settings, previous_restarts: int = 0,
           ) -> dict[str, Any]:
    """The importer pod writing into ``prime`` for ``target``."""
    pmeta = prime.get("metadata") or {}
    tmeta = target.get("metadata") or {}
    tann: Mapping[str, str] = tmeta.get("annotations") or {}
    pspec = prime.get("spec") or {}
    block = pspec.get("volumeMode") == "Block"
    extra = plumbing(source, config)
    container: dict[str, Any] = {
        "name": "importer",
        "image": settings.image,
        "imagePullPolicy": settings.pull_policy,
        "args": ["-v=1"],
        "env": _env(source=source, prime=prime, target_uid=str(tmeta.get("uid")),
                    config=config, block=block, settings=settings, extra=extra),
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": restricted_container_security(),
    }
    if config.resources:
        container["resources"] = {k: dict(v) for k, v in config.resources.items()}
    if block:
        container["volumeDevices"] = [{"name": DATA_VOLUME, "devicePath": BLOCK_DEVICE}]
    else:
        container["volumeMounts"] = [{"name": DATA_VOLUME, "mountPath": DATA_DIR}]
    volumes: list[dict[str, Any]] = [{"name": DATA_VOLUME, "persistentVolumeClaim": {
        "claimName": pmeta.get("name"), "readOnly": False}}]
    for i, secret in enumerate(source.secret_extra_headers):
        # As upstream: each Secret's keys become files the importer reads as headers, so
        # their values never appear in the pod spec, its env or the importer's argv.
        volumes.append({"name": SECRET_HEADERS_VOLUME.format(i),
                        "secret": {"secretName": secret}})
        container.setdefault("volumeMounts", []).append(
            {"name": SECRET_HEADERS_VOLUME.format(i),
             "mountPath": f"{SECRET_HEADERS_DIR}/{i}", "readOnly": True})
    volumes.extend(extra.volumes)
    if extra.mounts:
        container.setdefault("volumeMounts", []).extend(extra.mounts)
    if source.cert_configmap:
        volumes.append({"name": CERT_VOLUME,
                        "configMap": {"name": source.cert_configmap}})
        container.setdefault("volumeMounts", []).append(
            {"name": CERT_VOLUME, "mountPath": CERT_DIR, "readOnly": True})
    annotations = {api.CREATED_BY_CONTROLLER: "yes", "sidecar.istio.io/inject": "false"}
    annotations.update({k: tann[k] for k in api.POD_PASSTHROUGH if k in tann})
    if previous_restarts:
        annotations[api.PREVIOUS_RESTARTS] = str(previous_restarts)
    spec: dict[str, Any] = {
        "containers": [container],
        "restartPolicy": "OnFailure",
        "volumes": volumes,
        "enableServiceLinks": False,
        "securityContext": {"fsGroup": QEMU_UID, "runAsNonRoot": True,
                            "seccompProfile": {"type": "RuntimeDefault"}},
    }
    node = (pmeta.get("annotations") or {}).get(api.SELECTED_NODE)
    if node:
        spec["nodeName"] = node
    if tann.get(api.PRIORITY_CLASS):
        spec["priorityClassName"] = tann[api.PRIORITY_CLASS]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": names.importer_pod_name(str(pmeta.get("name"))),
            "namespace": pmeta.get("namespace"),
            "labels": {api.APP_LABEL: api.APP_LABEL_VALUE, api.COMPONENT_LABEL: "importer",
                       api.PROMETHEUS_LABEL: "true"},
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "name": pmeta.get("name"), "uid": pmeta.get("uid"),
                "controller": True, "blockOwnerDeletion": True,
            }],
        },
        "spec": spec,
    }
