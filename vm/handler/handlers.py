"""kopf wiring of the node handler (controller set ``handler``; env ``NODE_NAME``,
``POD_IP``, ``POD_NAMESPACE``): VMIs labelled with this node are polled and synced;
the console server runs beside kopf in the same event loop."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import kopf

from kubeclient import KubeError, shared
from vm import resync
from vm.api import certs
from vm.api.kube import HANDLER_SECRET
from vm.handler import forwards, sockets
from vm.handler import kube as handler_kube
from vm.handler.console import ConsoleServer, ConsoleSite
from vm.launcher import client as launcher_client
from vocab.kubevirt import GROUP, LABEL_NODE_NAME, VERSION, VMI_PLURAL

logger = logging.getLogger(__name__)
NODE = os.environ.get("NODE_NAME", "")
SOCKET_DIR = os.environ.get("SOCKET_DIR", handler_kube.SOCKETS)
PORT = int(os.environ.get("CONSOLE_PORT", "8186"))
POLL_SECONDS = 1.0

_locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)
_shut: set[str] = set()
_sites: list[ConsoleSite] = []


@kopf.on.startup()
async def start_console(logger: Any, **_: Any) -> None:
    if not NODE:
        raise kopf.PermanentError("NODE_NAME is not set: the handler must know its node")
    namespace = os.environ.get("POD_NAMESPACE", "kubevirt")
    address = os.environ.get("POD_IP") or "127.0.0.1"
    try:
        lifetime = certs.lifetimes(os.environ)[1]
    except ValueError as err:
        raise kopf.PermanentError(str(err)) from None
    issue = functools.partial(handler_kube.console_identity, shared(), namespace)
    first = None
    for _attempt in range(120):  # bounded: about two minutes for virt-api to issue it
        try:
            first = await asyncio.to_thread(issue)
            break
        except RuntimeError:
            await asyncio.sleep(1)
    if first is None:
        raise kopf.PermanentError(f"Secret {namespace}/{HANDLER_SECRET} never"
                                  " held a certificate (is virt-api up?)")
    site = ConsoleSite(ConsoleServer(shared(), node=NODE, socket_dir=SOCKET_DIR), issue,
                       lifetime=lifetime)
    await site.start(first, address=address, port=PORT)
    _sites.append(site)
    logger.info("console server on %s:%d for node %s", address, PORT, NODE)


@kopf.on.cleanup()
async def stop_console(**_: Any) -> None:
    for t in _tasks:
        t.cancel()
    for site in _sites:
        await site.stop()


def _sync(body: Any) -> None:
    vmi = dict(body)
    with _locks[vmi["metadata"]["uid"]]:
        try:
            handler_kube.sync(shared(), vmi, socket_dir=SOCKET_DIR, shut=_shut)
        except KubeError as err:
            logger.warning("sync of VMI %s/%s failed: %s", vmi["metadata"].get("namespace"),
                           vmi["metadata"].get("name"), err)
        _forward(vmi)


_endpoint_ports: dict[tuple[str, str], dict[str, set[forwards.Port]]] = {}
"""(namespace, name) of each Endpoints → its addresses' target ports (from the watch)."""
_forwarded: defaultdict[str, set[forwards.Port]] = defaultdict(set)
"""VMI uid → the ports its launcher forwards on request already."""


@kopf.on.event("", "v1", "endpoints")
def endpoints_event(body: Any, type: str | None, name: str, namespace: str | None,
                    **_: Any) -> None:
    """Keep what Services target; the poll forwards it (a VMI not running yet is tried
    again at the next poll)."""
    key = (namespace or "", name)
    if type == "DELETED":
        _endpoint_ports.pop(key, None)
    else:
        _endpoint_ports[key] = forwards.endpoint_ports(body)


def _forward(vmi: dict[str, Any]) -> None:
    """The ports Services target on a VMI that lists none, forwarded by its launcher."""
    uid = vmi["metadata"]["uid"]
    if (vmi.get("status") or {}).get("phase") != "Running":
        _forwarded.pop(uid, None)
        return
    for port, proto in forwards.wanted(vmi, list(_endpoint_ports.values()), _forwarded[uid]):
        try:
            answer = launcher_client.forward(handler_kube.socket_of(vmi, SOCKET_DIR),
                                             port=port, protocol=proto,
                                             timeout=handler_kube.STATUS_TIMEOUT)
        except launcher_client.ControlError as err:
            logger.debug("forward of %s/%d for %s: %s", proto, port, uid, err)
            return
        if answer.get("ok") is True:
            _forwarded[uid].add((port, proto))
            logger.info("VMI %s/%s: %s/%d forwarded for a Service",
                        vmi["metadata"].get("namespace"), vmi["metadata"].get("name"),
                        proto, port)
        else:
            logger.warning("VMI %s/%s: %s/%d not forwarded: %s",
                           vmi["metadata"].get("namespace"), vmi["metadata"].get("name"),
                           proto, port, answer.get("error"))
            _forwarded[uid].add((port, proto))  # refused for good (e.g. taken): not again


@kopf.on.event(GROUP, VERSION, VMI_PLURAL, labels={LABEL_NODE_NAME: NODE or kopf.ABSENT})
def vmi_event(body: Any, type: str | None, **_: Any) -> None:
    if type != "DELETED":
        _sync(body)


@kopf.on.event(GROUP, VERSION, VMI_PLURAL, labels={LABEL_NODE_NAME: kopf.ABSENT})
def unplaced_vmi_event(body: Any, type: str | None, **_: Any) -> None:
    """A VMI on no node yet: its socket directory now, not at the next poll, as its
    launcher pod waits for it (it may start here)."""
    if type != "DELETED":
        sockets.ensure(Path(SOCKET_DIR), _may_start([dict(body)]))


_tasks: list[asyncio.Task[None]] = []


@kopf.on.startup()
async def start_poll(**_: Any) -> None:
    _tasks.append(asyncio.create_task(resync.every(
        POLL_SECONDS, list_objects=_vmis_and_collect, sync=_sync)))


def _may_start(vmis: list[dict[str, Any]]) -> list[str]:
    return [v["metadata"]["uid"] for v in vmis
            if (v.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]


def _vmis_and_collect() -> list[dict[str, Any]]:
    """The VMIs on this node; on the way, the socket directories of the VMIs that may
    start here are made and those of VMIs that are gone (or elsewhere) removed."""
    unplaced = handler_kube.vmis_unplaced(shared())  # first: one placed meanwhile is in
    vmis = handler_kube.vmis_on(shared(), NODE)      # the second list
    root = Path(SOCKET_DIR)
    sockets.ensure(root, _may_start(unplaced + vmis))
    sockets.collect(root, (v["metadata"]["uid"] for v in unplaced + vmis))
    for gone in set(_forwarded) - {v["metadata"]["uid"] for v in vmis}:
        _forwarded.pop(gone, None)
    return vmis
