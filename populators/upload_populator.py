"""The upload populator: VolumeUploadSource → an upload server on PVC' (pure hooks and
renderings; :class:`UploadReconciler` does the I/O).

On the same twin-PVC base as the import populator (:mod:`populators.flow`): PVC' in the
target's namespace, then, as upstream, a pod ``cdi-upload-<PVC'>`` running the upload
server (``python -m importer.uploadserver``) on PVC' and a Service of the same name in
front of it, port 443 → 8443. The server's certificate and key, and the CA of the upload
proxy's client certificate, are in a Secret of the same name, mounted into the pod
(never in its spec, argv or logs). The Service and the Secret are owned by PVC', so they
go when it goes. When the pod is ready the target gets ``storage.pod.ready: "true"``
(the DataVolume shows UploadReady and the proxy forwards); when the server exits 0 the
flow rebinds PVC''s volume to the target, as for an import.

Scratch: a qcow2 is spooled to an emptyDir at ``/scratch`` (size limit: the claim's
request and 1 MiB for the filesystem's own blocks) while qemu-img converts it; raw
images need none (upstream uses a scratch PVC).
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
from collections.abc import Mapping
from typing import Any

import sizes
from pki import certs
from populators import flow
from populators.cdiconfig import CdiConfig
from populators.claims import Obj, annots, meta, owned_by, spec
from populators.errors import SourceError
from populators.importer_pod import (
    BLOCK_DEVICE,
    DATA_DIR,
    DATA_VOLUME,
    QEMU_UID,
    TERMINATION_LOG,
    Settings,
    restricted_container_security,
)
from populators.progress import IMPORT_METRIC
from vocab import cdi as api
from vocab import podenv

UPLOAD_KIND = "VolumeUploadSource"
UPLOAD_TARGET = api.ANN + "storage.upload.target"
"""On PVC': upstream's mark of a claim an upload server fills."""
POD_READY = api.ANN + "storage.pod.ready"
"""On the target: "true" while the upload server is ready for the upload (upstream's)."""
COMPONENT = "cdi-upload-server"
SERVICE_LABEL = "service"
UPLOAD_PORT = podenv.DEFAULT_UPLOAD_PORT
SERVICE_PORT = 443
TLS_VOLUME = "cdi-upload-tls"
TLS_DIR = "/etc/cdi-upload"
SCRATCH_VOLUME = "cdi-scratch-vol"
SCRATCH_DIR = "/scratch"
CLIENT_NAME = "cdi-uploadproxy"
"""The common name of the upload proxy's client certificate; the server lets in no other."""
CONTENT_TYPES = ("kubevirt", "archive")
SERVER_CERT_LIFETIME = dt.timedelta(hours=24)
"""Upstream's server certificate lifetime (renewed after half of it): each upload server
pod gets a fresh certificate and the deadline half a lifetime on, when it ends unless an
upload is under way (``DEADLINE``). The operator's ``UPLOAD_SERVER_CERT_LIFETIME``
(seconds) changes it."""


def server_name(prime: str) -> str:
    """Pod, Service and Secret of PVC' ``prime``: ``cdi-upload-<PVC'>`` as upstream."""
    return f"cdi-upload-{prime}"


def content_type(source: Obj) -> str:
    value = spec(source).get("contentType") or "kubevirt"
    if value not in CONTENT_TYPES:
        raise SourceError(f"VolumeUploadSource {meta(source).get('name')}: spec.contentType "
                          f"{value!r} is not one of {', '.join(CONTENT_TYPES)}")
    return str(value)


def _owner(prime: Obj) -> list[dict[str, Any]]:
    pm = meta(prime)
    return [{"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": pm.get("name"),
             "uid": pm.get("uid"), "controller": True, "blockOwnerDeletion": True}]


def _labels(prime: str) -> dict[str, str]:
    return {api.APP_LABEL: api.APP_LABEL_VALUE, api.COMPONENT_LABEL: COMPONENT,
            SERVICE_LABEL: server_name(prime)}


class UploadPopulator:
    kind = UPLOAD_KIND
    plural = "volumeuploadsources"
    metric = IMPORT_METRIC
    stages = flow.STAGES

    def source_namespace(self, target: Obj) -> str:
        return str(meta(target).get("namespace"))

    def prime_namespace(self, target: Obj) -> str:
        return str(meta(target).get("namespace"))

    def pod_name(self, prime: str) -> str:
        return server_name(prime)

    def prime_annotations(self, source: Obj) -> dict[str, str]:
        return {UPLOAD_TARGET: "", api.CONTENT_TYPE: content_type(source),
                api.PREALLOCATION_REQUESTED:
                    "true" if spec(source).get("preallocation") else "false"}

    def pod(self, *, target: Obj, prime: Obj, source: Obj, config: CdiConfig,
            settings: Settings, previous_restarts: int) -> dict[str, Any]:
        kind = content_type(source)
        if kind == "archive" and spec(prime).get("volumeMode") == "Block":
            raise SourceError("spec.contentType: ContentType Archive cannot have block "
                              "volumeMode")
        return render_pod(target=target, prime=prime, content=kind, config=config,
                          settings=settings, previous_restarts=previous_restarts,
                          preallocate=bool(spec(source).get("preallocation")))


def render_pod(*, target: Obj, prime: Obj, content: str, config: CdiConfig,
               settings: Settings, previous_restarts: int = 0,
               preallocate: bool = False) -> dict[str, Any]:
    """The upload server pod on PVC', confined as the importer pod."""
    pm, ps = meta(prime), spec(prime)
    prime_name = str(pm.get("name"))
    block = ps.get("volumeMode") == "Block"
    size = ((ps.get("resources") or {}).get("requests") or {}).get("storage", "")
    env = [
        {"name": podenv.DESTINATION,
         "value": BLOCK_DEVICE if block else f"{DATA_DIR}/disk.img"},
        {"name": podenv.CONTENT_TYPE, "value": content},
        *podenv.TargetEnv(
            image_size=str(size), owner_uid=str(meta(target).get("uid")),
            preallocation=preallocate,
            filesystem_overhead=config.overhead(storage_class=ps.get("storageClassName"),
                                                block=block)).render(),
        {"name": podenv.UPLOAD_TLS_DIR, "value": TLS_DIR},
        {"name": podenv.UPLOAD_CLIENT_NAME, "value": CLIENT_NAME},
        {"name": podenv.UPLOAD_PORT, "value": str(UPLOAD_PORT)},
        {"name": podenv.UPLOAD_SCRATCH_DIR, "value": SCRATCH_DIR},
        {"name": podenv.POD_IP, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    container: dict[str, Any] = {
        "name": COMPONENT,
        "image": settings.image.replace("importer", "uploadserver"),
        "imagePullPolicy": settings.pull_policy,
        "env": env,
        "ports": [{"name": "uploadserver", "containerPort": UPLOAD_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": UPLOAD_PORT,
                                       "scheme": "HTTPS"},
                           "initialDelaySeconds": 2, "periodSeconds": 5},
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": restricted_container_security(),
        "volumeMounts": [{"name": TLS_VOLUME, "mountPath": TLS_DIR, "readOnly": True},
                         {"name": SCRATCH_VOLUME, "mountPath": SCRATCH_DIR}],
    }
    if block:
        container["volumeDevices"] = [{"name": DATA_VOLUME, "devicePath": BLOCK_DEVICE}]
    else:
        container["volumeMounts"].append({"name": DATA_VOLUME, "mountPath": DATA_DIR})
    if config.resources:
        container["resources"] = {k: dict(v) for k, v in config.resources.items()}
    annotations = {api.CREATED_BY_CONTROLLER: "yes", "sidecar.istio.io/inject": "false"}
    if previous_restarts:
        annotations[api.PREVIOUS_RESTARTS] = str(previous_restarts)
    scratch: dict[str, Any] = {}
    if size:
        scratch["sizeLimit"] = scratch_limit(str(size))
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "restartPolicy": "OnFailure",
        "volumes": [
            {"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": prime_name,
                                                            "readOnly": False}},
            {"name": TLS_VOLUME, "secret": {"secretName": server_name(prime_name),
                                            "defaultMode": 0o440}},
            {"name": SCRATCH_VOLUME, "emptyDir": scratch},
        ],
        "enableServiceLinks": False,
        "securityContext": {"fsGroup": QEMU_UID, "runAsNonRoot": True,
                            "seccompProfile": {"type": "RuntimeDefault"}},
    }
    node = annots(prime).get(api.SELECTED_NODE)
    if node:
        pod_spec["nodeName"] = node
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": server_name(prime_name), "namespace": pm.get("namespace"),
                     "labels": _labels(prime_name), "annotations": annotations,
                     "ownerReferences": _owner(prime)},
        "spec": pod_spec,
    }


SCRATCH_HEADROOM = 1 << 20
"""Beyond the spool itself, which the server bounds by the claim's request: its directory
and the filesystem's own blocks, which a kubelet counts against the emptyDir too."""


def scratch_limit(request: str) -> str:
    """The scratch emptyDir's sizeLimit for a claim requesting ``request``."""
    try:
        return str(sizes.parse_bytes(request) + SCRATCH_HEADROOM)
    except ValueError:
        return request  # admission took it: not for this module to refuse


def render_service(*, prime: Obj) -> dict[str, Any]:
    prime_name = str(meta(prime).get("name"))
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": server_name(prime_name), "namespace": meta(prime).get("namespace"),
                     "labels": _labels(prime_name), "ownerReferences": _owner(prime)},
        "spec": {"selector": {SERVICE_LABEL: server_name(prime_name)},
                 "ports": [{"name": "uploadserver", "port": SERVICE_PORT,
                            "targetPort": UPLOAD_PORT, "protocol": "TCP"}]},
    }


def render_secret(*, prime: Obj, cert_pem: bytes, key_pem: bytes, ca_pem: bytes,
                  ) -> dict[str, Any]:
    """The server's certificate and key, and the CA its clients' certificates chain to."""
    prime_name = str(meta(prime).get("name"))

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": server_name(prime_name), "namespace": meta(prime).get("namespace"),
                     "labels": _labels(prime_name), "ownerReferences": _owner(prime)},
        "data": {"tls.crt": b64(cert_pem), "tls.key": b64(key_pem), "ca.crt": b64(ca_pem)},
    }


def with_deadline(pod: Mapping[str, Any], *, now: dt.datetime,
                  lifetime: dt.timedelta = SERVER_CERT_LIFETIME) -> dict[str, Any]:
    """The upload server pod with upstream's ``DEADLINE`` (RFC 3339), half the
    certificate's ``lifetime`` on: the server ends by then, unless an upload is under
    way, and a new pod gets a new certificate."""
    out = copy.deepcopy(dict(pod))
    container = out["spec"]["containers"][0]
    env = [e for e in container.get("env") or [] if e.get("name") != podenv.UPLOAD_DEADLINE]
    stamp = (now + lifetime / 2).astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    container["env"] = [*env, {"name": podenv.UPLOAD_DEADLINE, "value": stamp}]
    return out


def certificate_due(cert_pem: bytes, *, now: dt.datetime,
                    lifetime: dt.timedelta = SERVER_CERT_LIFETIME) -> bool:
    """Whether a server certificate ends too soon for a new pod: one made more than a
    twenty-fourth of its lifetime ago (an hour of 24) is replaced by a fresh one, and so
    is one that cannot be read."""
    try:
        return certs.not_after(cert_pem) < now + lifetime - lifetime / 24
    except ValueError:
        return True


def secret_due(secret: Obj, *, prime: Obj, now: dt.datetime,
               lifetime: dt.timedelta = SERVER_CERT_LIFETIME) -> bool:
    """Whether the server Secret found for a new pod is to be replaced: only one made for
    this PVC' (owned by it; a namesake someone else made is never touched), and only when
    its certificate is due."""
    if not owned_by(secret, prime):
        return False
    try:
        pem = base64.b64decode((secret.get("data") or {}).get("tls.crt") or "", validate=True)
    except ValueError:
        return True
    return certificate_due(pem, now=now, lifetime=lifetime)


def pod_ready(pod: Obj | None) -> bool:
    """Whether the upload server pod runs and passes its readiness probe."""
    if pod is None or (pod.get("status") or {}).get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])
