"""``rootdisk image-upload dv|pvc NAME --image-path FILE``: upload a local disk image, as
``virtctl image-upload`` does.

1. create the DataVolume (``source.upload``) — or for ``pvc`` a VolumeUploadSource and a
   claim whose ``dataSourceRef`` names it (upstream's ``pvc`` mode marks a claim for its
   older upload controller; rootdisk has only the populator) — unless ``--no-create``;
2. wait until it is ready for the upload (UploadReady);
3. ask the cluster for an upload token (``UploadTokenRequest``, needs RBAC ``create
   uploadtokenrequests``);
4. stream the file to the upload proxy over TLS (trusting the proxy's CA from the
   ConfigMap ``rootdisk/cdi-uploadproxy-ca``, or ``--insecure``) with a progress bar;
5. wait for Succeeded. Exit 0 on success, 1 with the reason on any failure.

The proxy: ``--uploadproxy-url``, else CDIConfig ``status.uploadProxyURL``, else the
ready endpoint of the Service ``rootdisk/cdi-uploadproxy`` (on ``rootdisk up`` pods
listen on host addresses, so that endpoint is reachable from the host).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from typing import Any

from vocab import cdi as api

logger = logging.getLogger(__name__)
EXIT_FAILED = 1
POLL = 0.25
CHUNK = 1024 * 1024
PROXY_NAMESPACE = "rootdisk"
PROXY_SERVICE = "cdi-uploadproxy"
PROXY_CA = "cdi-uploadproxy-ca"
TOKEN_PATH = f"/apis/{api.UPLOAD_API_VERSION}/namespaces/{{ns}}/{api.UPLOAD_TOKEN_PLURAL}"


class UploadFailed(Exception):
    pass


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("image-upload", help="upload a local disk image",
                              description="Create a DataVolume (or PVC) and upload a local"
                              " image into it through the upload proxy.")
    p.add_argument("kind", choices=["dv", "pvc"])
    p.add_argument("name")
    p.add_argument("--image-path", required=True, help="the local image file")
    p.add_argument("--size", help="the volume's size (e.g. 10Gi); needed unless --no-create")
    p.add_argument("--storage-class")
    p.add_argument("--access-mode", choices=["ReadWriteOnce", "ReadWriteMany",
                                             "ReadOnlyMany", "ReadWriteOncePod"])
    p.add_argument("--block-volume", action="store_true", help="volumeMode Block")
    p.add_argument("--force-bind", action="store_true",
                   help="bind at once, even on a WaitForFirstConsumer class (as virtctl)")
    p.add_argument("--uploadproxy-url", help="https://host:port of the upload proxy")
    p.add_argument("--insecure", action="store_true",
                   help="do not verify the upload proxy's certificate")
    p.add_argument("--no-create", action="store_true",
                   help="upload into an existing DataVolume/PVC")
    p.add_argument("-n", "--namespace", help="default: the kubeconfig context's, or default")
    p.add_argument("--kubeconfig", help="default: KUBECONFIG, ~/.kube/config, rootdisk up's")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds to wait for readiness and for the end (default 600)")
    p.set_defaults(func=cmd_image_upload)


def manifests(*, kind: str, name: str, namespace: str, size: str,
              storage_class: str | None, access_mode: str | None,
              block: bool, force_bind: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """(API path, object) to create for an upload (pure)."""
    annotations = {api.IMMEDIATE_BINDING: ""} if force_bind else {}
    storage: dict[str, Any] = {"resources": {"requests": {"storage": size}}}
    if storage_class:
        storage["storageClassName"] = storage_class
    if access_mode:
        storage["accessModes"] = [access_mode]
    if block:
        storage["volumeMode"] = "Block"
    if kind == "dv":
        dv = {"apiVersion": api.API_VERSION, "kind": api.DV_KIND,
              "metadata": {"name": name, "namespace": namespace,
                           "annotations": annotations},
              "spec": {"source": {"upload": {}}, "storage": storage}}
        return [(f"/apis/{api.API_VERSION}/namespaces/{namespace}/{api.DV_PLURAL}", dv)]
    source = f"upload-{name}"
    claim_spec = {"accessModes": [access_mode or "ReadWriteOnce"],
                  "resources": storage["resources"],
                  "dataSourceRef": {"apiGroup": api.GROUP,
                                    "kind": api.UPLOAD_SOURCE_KIND, "name": source}}
    if storage_class:
        claim_spec["storageClassName"] = storage_class
    if block:
        claim_spec["volumeMode"] = "Block"
    return [
        (f"/apis/{api.API_VERSION}/namespaces/{namespace}/volumeuploadsources",
         {"apiVersion": api.API_VERSION, "kind": api.UPLOAD_SOURCE_KIND,
          "metadata": {"name": source, "namespace": namespace},
          "spec": {"contentType": "kubevirt"}}),
        (f"/api/v1/namespaces/{namespace}/persistentvolumeclaims",
         {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
          "metadata": {"name": name, "namespace": namespace,
                       "annotations": {api.UPLOAD_REQUEST: "",
                                       **annotations}},
          "spec": claim_spec}),
    ]


def state(*, kind: str, obj: dict[str, Any] | None) -> tuple[str, str]:
    """("ready" | "done" | "failed" | "waiting", detail) of the upload target (pure)."""
    if obj is None:
        return "failed", "not found"
    if kind == "dv":
        status = obj.get("status") or {}
        phase = status.get("phase") or "Pending"
        if phase == "Failed":
            conds = {c.get("type"): c for c in status.get("conditions") or []}
            running = conds.get("Running") or {}
            return "failed", f"{running.get('reason') or 'Failed'}: {running.get('message') or ''}"
        if phase == "Succeeded":
            return "done", phase
        return ("ready" if phase == "UploadReady" else "waiting"), phase
    anns = (obj.get("metadata") or {}).get("annotations") or {}
    if anns.get(api.POD_PHASE) == "Failed":
        return "failed", (f"{anns.get(api.RUNNING_REASON)}: "
                          f"{anns.get(api.RUNNING_MESSAGE)}")
    if (obj.get("status") or {}).get("phase") == "Bound":
        return "done", "Bound"
    if anns.get(api.POD_READY) == "true":
        return "ready", "ready"
    return "waiting", (obj.get("status") or {}).get("phase") or "Pending"


class _Body:
    """The file as a request body: known length (Content-Length), read 1 MiB at a time,
    advancing the progress bar."""

    def __init__(self, path: str, bar: Any) -> None:
        self.fh = open(path, "rb")  # noqa: SIM115 - closed by close()
        self.size = os.fstat(self.fh.fileno()).st_size
        self.bar = bar

    def __len__(self) -> int:
        return self.size

    def read(self, _n: int = -1) -> bytes:
        data = self.fh.read(CHUNK)
        self.bar.update(len(data))
        return data

    def close(self) -> None:
        self.fh.close()


def cmd_image_upload(args: argparse.Namespace) -> int:
    try:
        return _upload(args)
    except UploadFailed as err:
        print(f"rootdisk image-upload: {err}", file=sys.stderr)
        return EXIT_FAILED


def _upload(args: argparse.Namespace) -> int:
    import requests
    from tqdm import tqdm

    from kubeclient import Client, KubeError, load_configuration
    from kubeclient.resources import CONFIGMAPS
    from rootdisk.kubeconfig import KubeconfigNotFound, discover, namespace

    if not os.path.isfile(args.image_path):
        raise UploadFailed(f"--image-path: {args.image_path!r} is not a file")
    if not args.no_create and not args.size:
        raise UploadFailed("--size: the size of the new volume is required (or --no-create)")
    try:
        found = discover(args.kubeconfig)
    except KubeconfigNotFound as err:
        raise UploadFailed(str(err)) from None
    ns = namespace(args.namespace, found)
    client = Client(load_configuration(found.path))
    target_path = (f"/apis/{api.API_VERSION}/namespaces/{ns}/{api.DV_PLURAL}/{args.name}"
                   if args.kind == "dv" else
                   f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{args.name}")

    def get_target() -> dict[str, Any] | None:
        try:
            out: dict[str, Any] = client.request("GET", target_path)
            return out
        except KubeError as err:
            if err.status == 404:
                return None
            raise UploadFailed(f"reading {args.kind} {ns}/{args.name}: {err}") from None

    try:
        if not args.no_create:
            if get_target() is not None:
                raise UploadFailed(f"{args.kind} {ns}/{args.name} exists already (use"
                                   " --no-create to upload into it)")
            for path, obj in manifests(kind=args.kind, name=args.name, namespace=ns,
                                       size=args.size, storage_class=args.storage_class,
                                       access_mode=args.access_mode, block=args.block_volume,
                                       force_bind=args.force_bind):
                try:
                    client.request("POST", path, body=obj)
                except KubeError as err:
                    raise UploadFailed(f"creating {obj['kind']} {args.name}: {err}") from None
            print(f"{args.kind} {ns}/{args.name} created", file=sys.stderr)
        deadline = time.monotonic() + args.timeout
        what, detail = _await(client, kind=args.kind, ns=ns, name=args.name,
                              get=get_target, until=("ready", "failed", "done"),
                              deadline=deadline)
        if what in ("failed", "done"):
            raise UploadFailed(f"{args.kind} {ns}/{args.name} is {detail}; not ready for"
                               " an upload")
        if what != "ready":
            hint = (" (its class waits for a first consumer: use --force-bind)"
                    if detail in ("PendingPopulation", "WaitForFirstConsumer") else "")
            raise UploadFailed(f"timed out waiting for {args.kind} {ns}/{args.name} to"
                               f" be ready for the upload ({detail}){hint}")
        logger.info("%s %s/%s is ready for the upload", args.kind, ns, args.name)
        try:
            answer = client.request("POST", TOKEN_PATH.format(ns=ns), body={
                "apiVersion": api.UPLOAD_API_VERSION, "kind": api.UPLOAD_TOKEN_KIND,
                "metadata": {"name": args.name, "namespace": ns},
                "spec": {"pvcName": args.name}})
        except KubeError as err:
            raise UploadFailed(f"upload token: {err}") from None
        token = str(((answer or {}).get("status") or {}).get("token") or "")
        if not token:
            raise UploadFailed("upload token: the cluster answered without a token")
        logger.info("upload token received")
        url = args.uploadproxy_url or _proxy_url(client)
        logger.info("upload proxy: %s", url)
        verify: bool | str = not args.insecure
        ca_file = None
        if not args.insecure:
            try:
                cm = client.get_or_none(CONFIGMAPS, PROXY_CA, PROXY_NAMESPACE)
            except KubeError:
                cm = None
            pem = ((cm or {}).get("data") or {}).get("ca.crt")
            if pem:
                ca_file = tempfile.NamedTemporaryFile("w", suffix=".pem", delete=False)  # noqa: SIM115
                ca_file.write(pem)
                ca_file.close()
                verify = ca_file.name
        size = os.path.getsize(args.image_path)
        bar = tqdm(total=size, unit="B", unit_scale=True, unit_divisor=1024,
                   desc=os.path.basename(args.image_path), file=sys.stderr)
        body = _Body(args.image_path, bar)
        try:
            resp = requests.post(f"{url.rstrip('/')}/v1beta1/upload", data=body,
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/octet-stream"},
                                 verify=verify, timeout=(30, 3600))
        except requests.RequestException as err:
            raise UploadFailed(f"upload to {url} failed: {err}") from None
        finally:
            body.close()
            bar.close()
            if ca_file is not None:
                os.unlink(ca_file.name)
        if resp.status_code != 200:
            raise UploadFailed(f"upload refused ({resp.status_code}): {resp.text.strip()}")
        logger.info("upload accepted; waiting for %s %s/%s", args.kind, ns, args.name)
        what, detail = _await(client, kind=args.kind, ns=ns, name=args.name, get=get_target,
                              until=("done", "failed"), deadline=deadline + args.timeout)
        if what == "done":
            print(f"{args.kind} {ns}/{args.name}: upload Succeeded")
            return 0
        if what == "failed":
            raise UploadFailed(f"{args.kind} {ns}/{args.name} Failed: {detail}")
        raise UploadFailed(f"timed out waiting for {args.kind} {ns}/{args.name}"
                           f" to succeed ({detail})")
    finally:
        client.close()


def _await(client: Any, *, kind: str, ns: str, name: str, get: Any,
           until: tuple[str, ...], deadline: float) -> tuple[str, str]:
    """The target's ``state`` once it is one of ``until``, else ("timeout", detail) at
    ``deadline``. Watches the one object (a change is seen as it happens, not at the next
    poll); when a watch ends or fails, reads the object again and watches on from it, a
    round at most every POLL seconds (a server that ends every watch at once, or fails
    it, is not asked again in a tight loop)."""
    from kubeclient import KubeError
    from kubeclient.resources import DATAVOLUMES, PVCS

    resource = DATAVOLUMES if kind == "dv" else PVCS
    while True:
        obj = get()
        what, detail = state(kind=kind, obj=obj)
        if what in until:
            return what, detail
        left = deadline - time.monotonic()
        if left <= 0:
            return "timeout", detail
        assert obj is not None  # a missing target is "failed"
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        started = time.monotonic()
        try:
            for event in client.watch(resource, resource_version=version,
                                             timeout=max(1, min(60, int(left))), namespace=ns,
                                             field_selector=f"metadata.name={name}"):
                if event.get("type") == "ERROR":
                    break  # e.g. 410 Gone: read it again
                if event.get("type") == "BOOKMARK":
                    continue
                gone = event.get("type") == "DELETED"
                what, detail = state(kind=kind, obj=None if gone else event.get("object"))
                if what in until:
                    return what, detail
                if time.monotonic() > deadline:
                    return "timeout", detail
        except KubeError as err:
            logger.info("watching %s %s/%s: %s; reading it again", kind, ns, name, err)
        time.sleep(max(0.0, min(POLL - (time.monotonic() - started),
                                deadline - time.monotonic())))


def _proxy_url(client: Any) -> str:
    """CDIConfig status.uploadProxyURL, else the proxy Service's ready endpoint."""
    from kubeclient import KubeError
    from kubeclient.resources import CDICONFIGS, ENDPOINTS

    try:
        config = client.get_or_none(CDICONFIGS, "config") or {}
        url = (config.get("status") or {}).get("uploadProxyURL")
        if url:
            return str(url) if "://" in str(url) else f"https://{url}"
        endpoints = client.get_or_none(ENDPOINTS, PROXY_SERVICE, PROXY_NAMESPACE)
    except KubeError as err:
        raise UploadFailed(f"finding the upload proxy: {err} (use --uploadproxy-url)") from None
    for subset in (endpoints or {}).get("subsets") or []:
        for address in subset.get("addresses") or []:
            port = next((p.get("port") for p in subset.get("ports") or []), 8443)
            ip = str(address.get("ip"))
            return f"https://{f'[{ip}]' if ':' in ip else ip}:{port}"
    raise UploadFailed("the upload proxy has no ready endpoint (use --uploadproxy-url)")
