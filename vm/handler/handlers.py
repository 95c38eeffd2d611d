"""kopf wiring of the node handler (controller set ``handler``; env ``NODE_NAME``,
``POD_IP``, ``POD_NAMESPACE``): VMIs labelled with this node are polled and synced;
the console server runs beside kopf in the same event loop."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import tempfile
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import kopf
from aiohttp import web

from pki import certs
from vm import resync
from vm.api.kube import load_pki
from vm.api.names import GROUP, LABEL_NODE_NAME, VERSION, VMI_PLURAL
from vm.handler import kube as handler_kube
from vm.handler import sockets
from vm.handler.console import ConsoleServer, server_context
from vm.kube import KubeError, shared

logger = logging.getLogger(__name__)
NODE = os.environ.get("NODE_NAME", "")
SOCKET_DIR = os.environ.get("SOCKET_DIR", handler_kube.SOCKETS)
PORT = int(os.environ.get("CONSOLE_PORT", "8186"))
POLL_SECONDS = 1.0

_locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)
_shut: set[str] = set()
_runner: list[web.AppRunner] = []
_tmp: list[tempfile.TemporaryDirectory[str]] = []


@kopf.on.startup()
async def start_console(logger: Any, **_: Any) -> None:
    if not NODE:
        raise kopf.PermanentError("NODE_NAME is not set: the handler must know its node")
    namespace = os.environ.get("POD_NAMESPACE", "kubevirt")
    address = os.environ.get("POD_IP") or "127.0.0.1"
    pki = None
    for _attempt in range(120):
        pki = await asyncio.to_thread(load_pki, shared(), namespace)
        if pki is not None:
            break
        await asyncio.sleep(1)
    if pki is None:
        raise kopf.PermanentError("Secret virt-api-certs never appeared (is virt-api up?)")
    ca, _serving = pki
    mine = certs.issue(ca=ca, common_name=f"virt-handler:{NODE}", ips=(address,),
                       now=dt.datetime.now(dt.UTC))
    tmp = tempfile.TemporaryDirectory(prefix="virt-handler-")
    _tmp.append(tmp)
    cert, key = certs.write_pair(tmp.name, mine.cert_pem, mine.key_pem)
    ctx = server_context(ca_pem=ca.cert_pem, cert_file=cert, key_file=key)
    runner = web.AppRunner(ConsoleServer(shared(), node=NODE, socket_dir=SOCKET_DIR).app(),
                           access_log=None)
    await runner.setup()
    await web.TCPSite(runner, address, PORT, ssl_context=ctx).start()
    _runner.append(runner)
    logger.info("console server on %s:%d for node %s", address, PORT, NODE)


@kopf.on.cleanup()
async def stop_console(**_: Any) -> None:
    for t in _tasks:
        t.cancel()
    for runner in _runner:
        await runner.cleanup()
    for tmp in _tmp:
        tmp.cleanup()


def _sync(body: Any) -> None:
    vmi = dict(body)
    with _locks[vmi["metadata"]["uid"]]:
        try:
            handler_kube.sync(shared(), vmi, socket_dir=SOCKET_DIR, shut=_shut)
        except KubeError as err:
            logger.warning("sync of VMI %s/%s failed: %s", vmi["metadata"].get("namespace"),
                           vmi["metadata"].get("name"), err)


@kopf.on.event(GROUP, VERSION, VMI_PLURAL, labels={LABEL_NODE_NAME: NODE or kopf.ABSENT})
def vmi_event(body: Any, type: str | None, **_: Any) -> None:
    if type != "DELETED":
        _sync(body)


_tasks: list[asyncio.Task[None]] = []


@kopf.on.startup()
async def start_poll(**_: Any) -> None:
    _tasks.append(asyncio.create_task(resync.every(
        POLL_SECONDS, list_objects=_vmis_and_collect, sync=_sync)))


def _vmis_and_collect() -> list[dict[str, Any]]:
    """The VMIs on this node; sockets of launchers that are gone are removed on the way."""
    vmis = handler_kube.vmis_on(shared(), NODE)
    sockets.collect(Path(SOCKET_DIR), (v["metadata"]["uid"] for v in vmis))
    return vmis
