"""The host-assisted clone's pods and their TLS Secrets, as manifests (pure), where the
copy runs (:func:`placement`), and what to do with the source pod given what exists.

PVC' lives in the source claim's namespace (the clone populator's ``prime_namespace``,
across namespaces too), so where a node reaches both volumes **one pod copies**
(``local``): the flow's pod mounts the source claim read-only beside PVC' and
``python -m importer.clonetarget`` reads it directly (``CLONER_SOURCE``): no stream, no
TLS, no Secrets, one pod start instead of two in sequence. Otherwise (the volumes on no
common node, a source claim not bound yet) **two pods** as upstream (``stream``), both
in the source namespace:

- the **target pod** (``cloner-<PVC'>``, the flow's pod, beside PVC') mounts PVC'
  read-write and runs ``python -m importer.clonetarget``: it listens on its pod IP
  (:8444, mutual TLS) and serves the progress metric (:8443);
- the **source pod** (``<target uid>-source-pod``, upstream's name, in the source
  claim's namespace) mounts the source claim read-only and runs
  ``python -m importer.cloner``, streaming to the target pod's address. It is made once
  the target pod runs with an IP, and replaced when that address changes. It is owned by
  the VolumeCloneSource (which lives in the source namespace and goes with the
  DataVolume) and names its target by annotation (owner references cannot cross
  namespaces, and its target claim is in another);
- one **Secret** beside each pod (``clone-target-tls-<uid>``, ``clone-source-tls-<uid>``)
  with the per-clone CA and that side's certificate and key, mounted read-only for the
  pod's group; never in argv, env values, logs or Events. The target's is owned by PVC',
  the source's by the VolumeCloneSource, and both are removed when the clone ends.

Both pods are confined like the importer (uid 107, fsGroup 107, all capabilities
dropped, RuntimeDefault seccomp, no privilege escalation).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from populators import names
from populators.cdiconfig import CdiConfig
from populators.claims import Obj, annots, meta, owner_ref, spec
from populators.importer_pod import (
    BLOCK_DEVICE,
    DATA_DIR,
    DATA_VOLUME,
    METRICS_PORT,
    QEMU_UID,
    TERMINATION_LOG,
    Settings,
    restricted_container_security,
)
from vocab import cdi as api
from vocab import podenv

CLONE_PORT = podenv.DEFAULT_CLONE_PORT
SOURCE_VOLUME = "cdi-clone-source"
SOURCE_DIR = "/source"
SOURCE_DEVICE = "/dev/cdi-clone-source"
TLS_VOLUME = "clone-tls"
TLS_DIR = "/etc/clone-tls"
TLS_MODE = 0o440
"""Readable by the pod's group (fsGroup) only."""
SERVER_NAME = "clone-target"
CLIENT_NAME = "clone-source"
TARGET_COMPONENT = "cloner"
LOCAL, STREAM, WAIT = "local", "stream", "wait"
PLACEMENT_KEY = "_copyPlacement"
"""Where the clone populator puts :func:`placement`'s answer beside the VolumeCloneSource
it hands to the hooks (never written to the API)."""


def placement(*, source_claim: Obj, source_volume: Obj | None, prime: Obj,
              prime_volume: Obj | None, binding_mode: str | None,
              source_binding_mode: str | None = None) -> str:
    """Where a host-assisted copy into ``prime`` (PVC') runs: :data:`LOCAL` (one pod
    mounts both claims), :data:`STREAM` (a source pod streams to the target pod) or
    :data:`WAIT` (PVC', or the source claim, is being provisioned and where its volume
    lands decides).

    One pod can mount both when they are in one namespace (always, from the clone
    populator: PVC' is made beside the source claim) and a node can reach both
    volumes: the source's volume is reachable from any node (no ``nodeAffinity``), or
    PVC''s volume has none or the same, or PVC' is provisioned where its first consumer
    runs (``WaitForFirstConsumer`` with no node picked for it yet: the scheduler places
    the pod by the source's volume and PVC' follows). A PVC' provisioned on its own
    (``Immediate``, or a node already picked) is waited for. A source claim not bound to
    a volume yet is waited for when its class (``source_binding_mode``) binds at once (a
    temporary claim being restored from a snapshot), and streamed otherwise, as before
    (a ``WaitForFirstConsumer`` one is bound by the source pod that mounts it)."""
    if meta(source_claim).get("namespace") != meta(prime).get("namespace"):
        return STREAM
    if source_volume is None:
        return WAIT if source_binding_mode == "Immediate" else STREAM
    need = spec(source_volume).get("nodeAffinity")
    if not need:
        return LOCAL
    if prime_volume is not None:
        have = spec(prime_volume).get("nodeAffinity")
        return LOCAL if not have or have == need else STREAM
    if binding_mode == "WaitForFirstConsumer" and not spec(prime).get("volumeName") \
            and not annots(prime).get(api.SELECTED_NODE):
        return LOCAL
    return WAIT


def is_local(pod: Mapping[str, Any] | None) -> bool:
    """Whether a target pod copies from the source claim itself (mounts it)."""
    volumes = ((pod or {}).get("spec") or {}).get("volumes") or []
    return any(v.get("name") == SOURCE_VOLUME for v in volumes)


def _image(settings: Settings, program: str) -> str:
    return settings.image.replace("importer", program) if "importer" in settings.image \
        else f"rootdisk/{program}"


def _pod_security() -> dict[str, Any]:
    return {"fsGroup": QEMU_UID, "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"}}


def _tls_volume(secret: str) -> dict[str, Any]:
    return {"name": TLS_VOLUME, "secret": {"secretName": secret, "defaultMode": TLS_MODE}}


def _container(*, name: str, image: str, settings: Settings, env: list[dict[str, Any]],
               config: CdiConfig) -> dict[str, Any]:
    c: dict[str, Any] = {
        "name": name, "image": image, "imagePullPolicy": settings.pull_policy, "env": env,
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": restricted_container_security(),
    }
    if config.resources:
        c["resources"] = {k: dict(v) for k, v in config.resources.items()}
    return c


def render_target_pod(*, target: Obj, prime: Obj, config: CdiConfig, settings: Settings,
                      previous_restarts: int = 0, source_claim: Obj | None = None,
                      ) -> dict[str, Any]:
    """The flow's pod of a host-assisted clone: receives the stream into PVC', or, given
    ``source_claim`` (:data:`LOCAL`), mounts that claim read-only and copies it itself."""
    pm, ps = meta(prime), spec(prime)
    block = ps.get("volumeMode") == "Block"
    size = ((ps.get("resources") or {}).get("requests") or {}).get("storage", "")
    env: list[dict[str, Any]] = [
        {"name": podenv.CLONER_TARGET,
         "value": BLOCK_DEVICE if block else f"{DATA_DIR}/disk.img"},
        *podenv.TargetEnv(
            image_size=str(size), owner_uid=str(meta(target).get("uid")),
            filesystem_overhead=config.overhead(storage_class=ps.get("storageClassName"),
                                                block=block)).render(),
    ]
    if source_claim is None:
        env += [{"name": podenv.CLONE_TLS_DIR, "value": TLS_DIR},
                {"name": podenv.CLONE_PORT, "value": str(CLONE_PORT)}]
    else:
        env.append(_source_env(source_claim))
    env.append({"name": podenv.POD_IP,
                "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    c = _container(name="clone-target", image=_image(settings, "clone-target"),
                   settings=settings, env=env, config=config)
    c["ports"] = [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}]
    volumes: list[dict[str, Any]] = [
        {"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": pm.get("name"),
                                                        "readOnly": False}}]
    if source_claim is None:
        secret, _ = names.clone_secret_names(str(meta(target).get("uid")))
        c["ports"].append({"name": "clone", "containerPort": CLONE_PORT, "protocol": "TCP"})
        c["volumeMounts"] = [{"name": TLS_VOLUME, "mountPath": TLS_DIR, "readOnly": True}]
        volumes.append(_tls_volume(secret))
    else:
        _mount_source(c, volumes, source_claim)
    if block:
        c.setdefault("volumeDevices", []).append({"name": DATA_VOLUME,
                                                  "devicePath": BLOCK_DEVICE})
    else:
        c.setdefault("volumeMounts", []).append({"name": DATA_VOLUME, "mountPath": DATA_DIR})
    annotations = {api.CREATED_BY_CONTROLLER: "yes", "sidecar.istio.io/inject": "false"}
    if previous_restarts:
        annotations[api.PREVIOUS_RESTARTS] = str(previous_restarts)
    pod_spec: dict[str, Any] = {
        "containers": [c],
        "restartPolicy": "OnFailure",
        "volumes": volumes,
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "securityContext": _pod_security(),
    }
    node = annots(prime).get(api.SELECTED_NODE)
    if node:
        pod_spec["nodeName"] = node
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": names.cloner_pod_name(str(pm.get("name"))),
            "namespace": pm.get("namespace"),
            "labels": {api.APP_LABEL: api.APP_LABEL_VALUE, api.COMPONENT_LABEL: TARGET_COMPONENT,
                       api.PROMETHEUS_LABEL: "true"},
            "annotations": annotations,
            "ownerReferences": [owner_ref(prime, kind="PersistentVolumeClaim")],
        },
        "spec": pod_spec,
    }


def _source_env(source_claim: Obj) -> dict[str, Any]:
    block = spec(source_claim).get("volumeMode") == "Block"
    return {"name": podenv.CLONER_SOURCE,
            "value": SOURCE_DEVICE if block else f"{SOURCE_DIR}/disk.img"}


def _mount_source(container: dict[str, Any], volumes: list[dict[str, Any]],
                  source_claim: Obj) -> None:
    """The source claim into ``container``, read-only (a Block one as a device: a
    device's read-only-ness is the claim's ``readOnly``)."""
    volumes.append({"name": SOURCE_VOLUME, "persistentVolumeClaim": {
        "claimName": meta(source_claim).get("name"), "readOnly": True}})
    if spec(source_claim).get("volumeMode") == "Block":
        container.setdefault("volumeDevices", []).append(
            {"name": SOURCE_VOLUME, "devicePath": SOURCE_DEVICE})
    else:
        container.setdefault("volumeMounts", []).append(
            {"name": SOURCE_VOLUME, "mountPath": SOURCE_DIR, "readOnly": True})


def render_grow_pod(*, target: Obj, prime: Obj, config: CdiConfig, settings: Settings,
                    previous_restarts: int = 0) -> dict[str, Any]:
    """After a CSI clone into a larger Filesystem claim: the storage copied the source's
    ``disk.img``; this pod grows it to the claim's usable size (upstream's prep-claim
    step). The target pod's program, without a stream: no Secret, no network."""
    pod = render_target_pod(target=target, prime=prime, config=config, settings=settings,
                            previous_restarts=previous_restarts)
    c = pod["spec"]["containers"][0]
    c["env"] = [e for e in c["env"] if e["name"] in (
        podenv.CLONER_TARGET, podenv.IMAGE_SIZE, podenv.FILESYSTEM_OVERHEAD, podenv.OWNER_UID)]
    c["env"].append({"name": podenv.CLONE_GROW_ONLY, "value": "true"})
    c.pop("ports", None)
    c["volumeMounts"] = [m for m in c.get("volumeMounts") or [] if m["name"] != TLS_VOLUME]
    pod["spec"]["volumes"] = [v for v in pod["spec"]["volumes"] if v["name"] != TLS_VOLUME]
    return pod


def target_reference(target: Obj) -> str:
    tm = meta(target)
    return f"{tm.get('namespace')}/{tm.get('name')}/{tm.get('uid')}"


def render_source_pod(*, target: Obj, source_claim: Obj, clone_source: Obj, address: str,
                      config: CdiConfig, settings: Settings,
                      target_restarts: int = 0) -> dict[str, Any]:
    """The source pod: reads the source claim (read-only) and streams it to ``address``
    (the target pod's ``ip:port``)."""
    uid = str(meta(target).get("uid"))
    sm = meta(source_claim)
    _, secret = names.clone_secret_names(uid)
    env: list[dict[str, Any]] = [
        _source_env(source_claim),
        {"name": podenv.CLONE_TARGET, "value": address},
        {"name": podenv.CLONE_TLS_DIR, "value": TLS_DIR},
        {"name": podenv.CLONE_SERVER_NAME, "value": SERVER_NAME},
    ]
    c = _container(name="cdi-clone-source", image=_image(settings, "cloner"),
                   settings=settings, env=env, config=config)
    c["volumeMounts"] = [{"name": TLS_VOLUME, "mountPath": TLS_DIR, "readOnly": True}]
    volumes: list[dict[str, Any]] = []
    _mount_source(c, volumes, source_claim)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": names.clone_source_pod_name(uid),
            "namespace": sm.get("namespace"),
            "labels": {api.APP_LABEL: api.APP_LABEL_VALUE,
                       api.COMPONENT_LABEL: api.CLONE_SOURCE_VALUE},
            "annotations": {api.CREATED_BY_CONTROLLER: "yes",
                            "sidecar.istio.io/inject": "false",
                            api.PRIME_TARGET: target_reference(target),
                            api.CLONE_TARGET_ADDRESS: address,
                            api.CLONE_TARGET_RESTARTS: str(target_restarts)},
            "ownerReferences": [owner_ref(clone_source, kind="VolumeCloneSource",
                                          api_version=f"{api.GROUP}/"
                                                      f"{api.VERSION}")],
        },
        "spec": {
            "containers": [c],
            "restartPolicy": "OnFailure",
            "volumes": [*volumes, _tls_volume(secret)],
            "enableServiceLinks": False,
            "automountServiceAccountToken": False,
            "securityContext": _pod_security(),
        },
    }


def render_secret(*, name: str, namespace: str, ca: bytes, cert: bytes, key: bytes,
                  fingerprint: str, owner: Mapping[str, Any], target: Obj) -> dict[str, Any]:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {api.APP_LABEL: api.APP_LABEL_VALUE},
                     "annotations": {api.CLONE_CA: fingerprint,
                                     api.PRIME_TARGET: target_reference(target)},
                     "ownerReferences": [dict(owner)]},
        "data": {"ca.crt": b64(ca), "tls.crt": b64(cert), "tls.key": b64(key)},
    }


def secrets_match(target_secret: Obj | None, source_secret: Obj | None) -> bool:
    """Both halves exist and come from the same per-clone CA."""
    if target_secret is None or source_secret is None:
        return False
    a, b = annots(target_secret).get(api.CLONE_CA), annots(source_secret).get(api.CLONE_CA)
    return bool(a) and a == b


def ours(obj: Obj | None, target: Obj) -> bool:
    """Made for this target (a namesake someone else made is never touched)."""
    return obj is not None and annots(obj).get(api.PRIME_TARGET) == target_reference(target)


# -- the source pod's next step ---------------------------------------------------------


@dataclass(frozen=True)
class SourceStep:
    create: bool = False
    delete_pod: bool = False
    delete_secrets: bool = False


def target_restarts(pod: Obj | None) -> int:
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    return int(statuses[0].get("restartCount") or 0) if statuses else 0


def target_address(pod: Obj | None) -> str:
    """``ip:port`` of a running target pod, else ""."""
    status = (pod or {}).get("status") or {}
    ip = status.get("podIP")
    if status.get("phase") != "Running" or not ip or meta(pod).get("deletionTimestamp"):
        return ""
    host = f"[{ip}]" if ":" in str(ip) else str(ip)
    return f"{host}:{CLONE_PORT}"


def source_step(*, finished: bool, target_pod: Obj | None, source_pod: Obj | None,
                ) -> SourceStep:
    """``finished``: the clone is over (populated, failed or the target going)."""
    if finished:
        return SourceStep(delete_pod=source_pod is not None, delete_secrets=True)
    address = target_address(target_pod)
    if source_pod is None:
        return SourceStep(create=bool(address))
    if meta(source_pod).get("deletionTimestamp"):
        return SourceStep()
    have = annots(source_pod).get(api.CLONE_TARGET_ADDRESS)
    target_done = ((target_pod or {}).get("status") or {}).get("phase") == "Succeeded"
    if (address and have != address) or (target_pod is None and not target_done):
        return SourceStep(delete_pod=True)  # streaming to a target pod that is not there
    made_for = str(annots(source_pod).get(api.CLONE_TARGET_RESTARTS) or "0")
    if address and made_for.isdigit() and target_restarts(target_pod) > int(made_for):
        # the target restarted (a stream failed): its new run waits for a new stream,
        # which a source pod that finished (or gave up on the old run) will not send
        return SourceStep(delete_pod=True)
    return SourceStep()
