"""The serial console end to end: a client's WebSocket to the API server, through the
aggregator to virt-api, over mutual TLS to the node handler, into a real launcher's
control socket and a booted Linux guest that echoes what is typed. Also the handler's
phase sync from the same launcher."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import shutil
import ssl
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from apiservice.refusal import reason_in
from kubeclient import Client
from kubeclient.resources import PODS, VMIS
from pki import certs, serving
from tests.fixtures.appthread import AppThread
from tests.fixtures.guests import GuestBuilder, LinuxGuest
from tests.vm.launcher.harness import Launch
from vm.api.certs import LEAF_LIFETIME, handler_server_name
from vm.api.server import refused
from vm.handler import kube as handler_kube
from vm.handler.console import ConsoleServer, server_context
from vm.handler.kube import console_identity

from .test_virtapi import cluster  # noqa: F401  (module fixture: server + virt-api)
from .virtapi_harness import read_ca

NODE = "node1"


@pytest.fixture(scope="module")
def guest() -> LinuxGuest:
    if not shutil.which("qemu-system-x86_64"):
        pytest.skip("qemu-system-x86_64 not installed")
    return GuestBuilder().linux(mode="wait")


class HandlerThread:
    def __init__(self, kube: Client, socket_dir: Path, tmp: Path) -> None:
        first = console_identity(kube, "kubevirt")
        self.ctx = server_context(first.bundle)
        serving.Serving(lambda: first, lifetime=LEAF_LIFETIME, contexts=(self.ctx,),
                        trusting=(self.ctx,)).load(first)
        self.server = ConsoleServer(kube, node=NODE, socket_dir=str(socket_dir))
        self._server = AppThread(self._app, name="node handler")

    @property
    def port(self) -> int:
        return self._server.port

    async def _app(self) -> tuple[web.Application, ssl.SSLContext]:
        return self.server.app(), self.ctx

    def start(self) -> HandlerThread:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()


@pytest.fixture
def running_vmi(cluster: tuple[Any, Client, int], guest: LinuxGuest,  # noqa: F811
                tmp_path: Path) -> Iterator[tuple[dict[str, Any], Launch]]:
    kube = cluster[1]
    ns = "default"
    name = f"c-{uuid.uuid4().hex[:6]}"
    vmi = _vmi(kube, ns, name)
    run = Launch({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                  "metadata": {k: vmi["metadata"][k] for k in ("name", "namespace", "uid")},
                  "spec": vmi["spec"]})
    try:
        run.add_disk("root", guest.raw)
        run.start()
        run.wait_for_console(guest.marker, timeout=180)
        yield vmi, run
    finally:
        run.cleanup()


def test_handler_sets_running_from_the_launcher(cluster: tuple[Any, Client, int],  # noqa: F811
                                                running_vmi: tuple[dict[str, Any], Launch]
                                                ) -> None:
    kube = cluster[1]
    vmi, run = running_vmi
    ns, name = vmi["metadata"]["namespace"], vmi["metadata"]["name"]
    kube.patch(VMIS, name, {"status": {"phase": "Scheduled", "nodeName": NODE}}, ns,
               subresource="status")
    handler_kube.sync(kube, kube.get_or_none(VMIS, name, ns), socket_dir=str(run.socket_root),
                      shut=set())
    st = kube.get_or_none(VMIS, name, ns)["status"]
    assert st["phase"] == "Running"
    assert st["phaseTransitionTimestamps"][-1]["phase"] == "Running"
    run.request({"cmd": "pause"})
    run.wait_for_state("paused")
    handler_kube.sync(kube, kube.get_or_none(VMIS, name, ns), socket_dir=str(run.socket_root),
                      shut=set())
    conds = {c["type"]: c for c in kube.get_or_none(VMIS, name, ns)["status"]["conditions"]}
    assert conds["Paused"]["status"] == "True"
    run.request({"cmd": "unpause"})
    run.wait_for_state("running")
    # deleting the VMI makes the handler ask for a shutdown with the VMI's grace period
    # (as virt-api's stop would have set it: a user may no longer change a VMI's spec)
    doomed = dict(kube.get_or_none(VMIS, name, ns))
    doomed["metadata"] = dict(doomed["metadata"], deletionTimestamp="2026-01-01T00:00:00Z")
    doomed["spec"] = dict(doomed["spec"], terminationGracePeriodSeconds=90)
    shut: set[str] = set()
    handler_kube.sync(kube, doomed, socket_dir=str(run.socket_root), shut=shut)
    assert shut == {vmi["metadata"]["uid"]}
    assert run.wait(timeout=120) == 0  # the guest took the ACPI power button
    assert run.termination()["phase"] == "Succeeded"


def test_console_through_the_api_server(cluster: tuple[Any, Client, int],  # noqa: F811
                                        running_vmi: tuple[dict[str, Any], Launch],
                                        tmp_path: Path) -> None:
    server, kube, _ = cluster
    vmi, run = running_vmi
    ns, name = vmi["metadata"]["namespace"], vmi["metadata"]["name"]
    base = f"/apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/{name}"
    handler = HandlerThread(kube, run.socket_root, tmp_path).start()
    try:
        kube.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"virt-handler-{name}", "labels": {"kubevirt.io": "virt-handler"}},
            "spec": {"nodeName": NODE, "containers": [{
                "name": "h", "image": "rootdisk/operator",
                "ports": [{"name": "console", "containerPort": handler.port}]}]}}, "kubevirt")
        kube.patch(PODS, f"virt-handler-{name}", {"status": {
            "phase": "Running", "podIP": "127.0.0.1"}}, "kubevirt", subresource="status")

        async def talk(expect_status: int | None = None) -> str:
            try:
                return await _talk(expect_status)
            finally:
                # aiohttp closes a TLS connection after the session's close returns: let the
                # loop run it, or asyncio.run() ends first and the socket is reclaimed by the
                # GC later, as a ResourceWarning in whatever test is running then
                await asyncio.sleep(0.25)

        async def _talk(expect_status: int | None = None) -> str:
            ctx = ssl.create_default_context(cafile=str(server.ca_path))
            headers = {"Authorization": f"Bearer {server.admin_token}"}
            async with aiohttp.ClientSession() as s:
                if expect_status is not None:
                    async with s.get(server.url + base + "/console", ssl=ctx,
                                     headers=headers) as resp:
                        assert resp.status == expect_status, await resp.text()
                        return await resp.text()
                async with s.ws_connect(server.url + base + "/console", ssl=ctx,
                                        headers=headers,
                                        protocols=("plain.kubevirt.io",)) as ws:
                    await ws.send_bytes(b"hello-console\n")
                    seen = b""
                    async with asyncio.timeout(60):
                        while b"ECHO:hello-console" not in seen:
                            msg = await ws.receive()
                            assert msg.type == aiohttp.WSMsgType.BINARY, msg
                            seen += msg.data
                    return seen.decode(errors="replace")

        text = asyncio.run(talk(expect_status=409))  # not Running yet
        assert "is not running" in text
        kube.patch(VMIS, name, {"status": {"phase": "Running", "nodeName": NODE}}, ns,
                   subresource="status")
        assert "ECHO:hello-console" in asyncio.run(talk())

        # the same through `rootdisk console` (stdin a pipe here; Ctrl+] detaches)
        import subprocess
        import sys
        proc = subprocess.Popen(
            [sys.executable, "-m", "rootdisk", "console", name, "-n", ns, "--kubeconfig",
             str(server.kubeconfig_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
        try:
            seen = b""
            deadline = time.monotonic() + 60
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(b"from-cli\n")
            proc.stdin.flush()
            os.set_blocking(proc.stdout.fileno(), False)
            while b"ECHO:from-cli" not in seen and time.monotonic() < deadline:
                chunk = proc.stdout.read(4096)
                seen += chunk or b""
                if not chunk:
                    time.sleep(0.1)
            if b"ECHO:from-cli" not in seen:
                proc.kill()
                _, err = proc.communicate(timeout=10)
                raise AssertionError(f"no echo from `rootdisk console`: {seen!r} {err!r}")
            proc.stdin.write(b"\x1d")
            proc.stdin.flush()
            assert proc.wait(30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for f in (proc.stdin, proc.stdout, proc.stderr):
                if f is not None:
                    f.close()
    finally:
        handler.stop()


def test_handler_console_takes_only_virt_api(cluster: tuple[Any, Client, int],  # noqa: F811
                                             tmp_path: Path) -> None:
    """A client certificate from the same CA but another name is refused (401); the
    handlers' own certificate (what any node's handler holds) fails the TLS handshake,
    being for serving only, and so does no certificate at all."""
    kube = cluster[1]
    socket_dir = tmp_path / "sockets"
    socket_dir.mkdir()
    handler = HandlerThread(kube, socket_dir, tmp_path).start()
    try:
        found = read_ca(kube, "kubevirt")
        assert found is not None
        ca, bundle = found
        other = certs.issue(ca=ca, common_name="intruder", now=dt.datetime.now(dt.UTC))
        (tmp_path / "o.crt").write_bytes(other.cert_pem)
        (tmp_path / "o.key").write_bytes(other.key_pem)
        handlers = console_identity(kube, "kubevirt").pair
        (tmp_path / "h.crt").write_bytes(handlers.cert_pem)
        (tmp_path / "h.key").write_bytes(handlers.key_pem)
        url = (f"https://127.0.0.1:{handler.port}/v1/namespaces/default/"
               "virtualmachineinstances/x/console?uid=y")

        async def get(cert: str | None) -> int:
            ctx = ssl.create_default_context(cadata=bundle.decode())
            if cert is not None:
                ctx.load_cert_chain(str(tmp_path / f"{cert}.crt"), str(tmp_path / f"{cert}.key"))
            async with aiohttp.ClientSession() as s, s.get(
                    url, ssl=ctx, server_hostname=handler_server_name("kubevirt")) as resp:
                return resp.status

        assert asyncio.run(get("o")) == 401
        for cert in ("h", None):
            with pytest.raises((aiohttp.ClientError, ssl.SSLError)):
                asyncio.run(get(cert))
    finally:
        handler.stop()


def _vmi(kube: Client, ns: str, name: str) -> dict[str, Any]:
    """A VMI with one claim disk (no launcher: the tests put what they need in its place)."""
    vmi: dict[str, Any] = kube.create(VMIS, {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": name},
        "spec": {"domain": {"resources": {"requests": {"memory": "128Mi"}},
                            "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}},
                 "volumes": [{"name": "root", "persistentVolumeClaim": {"claimName": "r"}}]}},
        ns)
    return vmi


def _place(kube: Client, ns: str, name: str, *, node: str, handler_port: int) -> None:
    """The VMI Running on ``node``, whose handler pod (``virt-handler-NAME``) serves the
    console on ``handler_port`` of 127.0.0.1."""
    kube.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"virt-handler-{name}", "labels": {"kubevirt.io": "virt-handler"}},
        "spec": {"nodeName": node, "containers": [{
            "name": "h", "image": "rootdisk/operator",
            "ports": [{"name": "console", "containerPort": handler_port}]}]}}, "kubevirt")
    kube.patch(PODS, f"virt-handler-{name}", {"status": {
        "phase": "Running", "podIP": "127.0.0.1"}}, "kubevirt", subresource="status")
    kube.patch(VMIS, name, {"status": {"phase": "Running", "nodeName": node}}, ns,
               subresource="status")


async def _get_console(server: Any, ns: str, name: str) -> tuple[int, str]:
    """A plain GET of the VMI's console subresource (no upgrade): status and body."""
    base = (f"/apis/subresources.kubevirt.io/v1/namespaces/{ns}/"
            f"virtualmachineinstances/{name}/console")
    ctx = ssl.create_default_context(cafile=str(server.ca_path))
    headers = {"Authorization": f"Bearer {server.admin_token}"}
    try:
        async with aiohttp.ClientSession() as s, s.get(
                server.url + base, ssl=ctx, headers=headers) as resp:
            return resp.status, await resp.text()
    finally:
        await asyncio.sleep(0.25)  # as in talk() above: let aiohttp close


def test_a_launcher_that_never_answers_the_console_request_gets_a_503_in_time(
        cluster: tuple[Any, Client, int], tmp_path: Path,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack: a launcher (its pod is the user's) accepts the handler's connection and
    never answers. The whole handshake has one deadline: the handler answers 503 (which
    virt-api passes on), instead of a 500 after its read timeout."""
    import socket as socketlib

    from vm.handler import console as handler_console

    monkeypatch.setattr(handler_console, "HANDSHAKE_SECONDS", 1.0)
    server, kube, _ = cluster
    ns, name = "default", f"mute-{uuid.uuid4().hex[:6]}"
    vmi = _vmi(kube, ns, name)
    import tempfile

    socket_dir = Path(tempfile.mkdtemp(prefix="mute-", dir="/tmp"))  # sun_path is short
    path = handler_kube.socket_of(vmi, str(socket_dir))
    path.parent.mkdir(parents=True)
    mute = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM)
    mute.bind(str(path))
    mute.listen(4)  # accepted by the kernel, never read nor answered
    handler = HandlerThread(kube, socket_dir, tmp_path).start()
    for stale in kube.list(PODS, "kubevirt", labelSelector="kubevirt.io=virt-handler"):
        kube.delete(PODS, stale["metadata"]["name"], "kubevirt")  # earlier tests' handlers
    try:
        _place(kube, ns, name, node=NODE, handler_port=handler.port)
        started = time.monotonic()
        status, text = asyncio.run(_get_console(server, ns, name))
        waited = time.monotonic() - started
        assert status == 503, (status, text)
        # the handler's own 503, with its reason (not aiohttp's "Invalid response status")
        assert json.loads(text)["message"] == (
            "the node handler refused the console: launcher unreachable: no answer to the "
            "console request (TimeoutError)"), text
        assert waited < 6, waited
    finally:
        handler.stop()
        mute.close()
        shutil.rmtree(socket_dir, ignore_errors=True)


def test_a_handler_that_has_not_the_vmi_on_its_node_gets_a_404_with_its_reason(
        cluster: tuple[Any, Client, int], tmp_path: Path) -> None:  # noqa: F811
    """virt-api found the handler of the VMI's node, but that handler does not have the VMI
    (here: a handler on another node than it says): the handler's 404 and its reason reach
    the client."""
    server, kube, _ = cluster
    ns, name = "default", f"gone-{uuid.uuid4().hex[:6]}"
    node = f"elsewhere-{uuid.uuid4().hex[:6]}"  # no other test's handler pod is there
    vmi = _vmi(kube, ns, name)
    socket_dir = tmp_path / "sockets"
    socket_dir.mkdir()
    handler = HandlerThread(kube, socket_dir, tmp_path).start()  # it is on NODE
    try:
        _place(kube, ns, name, node=node, handler_port=handler.port)
        code, text = asyncio.run(_get_console(server, ns, name))
        assert code == 404, (code, text)
        doc = json.loads(text)
        assert (doc["kind"], doc["reason"], doc["code"]) == ("Status", "NotFound", 404), doc
        assert doc["message"] == (
            f"the node handler refused the console: VMI {ns}/{name} "
            f"({vmi['metadata']['uid']}) is not on node {NODE}"), doc
        # `rootdisk console` prints that reason, not aiohttp's "Invalid response status"
        import subprocess
        import sys
        done = subprocess.run(
            [sys.executable, "-m", "rootdisk", "console", name, "-n", ns, "--kubeconfig",
             str(server.kubeconfig_path)], stdin=subprocess.DEVNULL, capture_output=True,
            text=True, timeout=60)
        assert done.returncode == 1, done
        assert done.stderr.strip() == (  # and no "Successfully connected" before it
            f"rootdisk console: 404 {doc['message']}"), done.stderr
        # a VMI that is not there: the wait is said, and bounded by --timeout
        done = subprocess.run(
            [sys.executable, "-m", "rootdisk", "console", "no-such-vmi", "-n", ns,
             "--timeout", "1", "--kubeconfig", str(server.kubeconfig_path)],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
        assert done.returncode != 0, done
        assert done.stderr.splitlines() == [
            f"waiting up to 1 s for VMI {ns}/no-such-vmi to be running (now: no such VMI;"
            " --timeout sets the wait)",
            f"rootdisk console: VMI {ns}/no-such-vmi is not running (phase absent) after"
            " 1 s"], done.stderr
    finally:
        handler.stop()
        kube.delete(PODS, f"virt-handler-{name}", "kubevirt")


@pytest.mark.parametrize(("body", "content_type", "reason"), [
    (b'{"message": "launcher unreachable: gone"}', "application/json",
     "launcher unreachable: gone"),
    (b'{"kind": "Status", "message": "a\\nb\\u0007 c"}', "application/json", "a b c"),
    (b'{"message": 3}', "application/json", ""),
    (b'["message"]', "application/json", ""),
    (b'{"message": "cut', "application/json", ""),
    (b"plain\r\nreason ", "text/plain", "plain reason"),
    (b"<html>no</html>", "text/html", ""),
    (b"x" * 4096, "text/plain", "x" * 297 + "..."),
])
def test_the_reason_of_a_refusal_is_one_bounded_line(body: bytes, content_type: str,
                                                     reason: str) -> None:
    assert reason_in(body, content_type) == reason


@pytest.mark.parametrize(("code", "answer"), [(404, 404), (503, 503), (500, 503),
                                              (401, 500), (400, 500)])
def test_a_refusal_by_the_handler_keeps_its_class(code: int, answer: int) -> None:
    resp = refused(code, "")
    assert resp.status == answer
    assert resp.text is not None
    assert json.loads(resp.text)["message"] == (
        f"the node handler refused the console with HTTP {code}")


class MuteHandler:
    """A node handler (its real certificate and trust) that takes the console request
    and never answers it."""

    def __init__(self, kube: Client) -> None:
        first = console_identity(kube, "kubevirt")
        self.ctx = server_context(first.bundle)
        serving.Serving(lambda: first, lifetime=LEAF_LIFETIME, contexts=(self.ctx,),
                        trusting=(self.ctx,)).load(first)
        self._server = AppThread(self._app, name="mute node handler")

    async def _app(self) -> tuple[web.Application, ssl.SSLContext]:
        async def mute(_: web.Request) -> web.StreamResponse:
            await asyncio.sleep(5)  # well past virt-api's bound here; short for the stop
            return web.Response(status=500)

        app = web.Application()
        app.router.add_get("/v1/namespaces/{ns}/virtualmachineinstances/{name}/console", mute)
        return app, self.ctx

    @property
    def port(self) -> int:
        return self._server.port

    def __enter__(self) -> MuteHandler:
        self._server.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.stop()


def test_a_node_handler_that_never_answers_gets_a_503_in_time(
        cluster: tuple[Any, Client, int], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """virt-api bounds its whole handshake with the handler (HANDSHAKE_TIMEOUT, 1 s here):
    before, only the connect was, and a handler that took the request and never answered
    held the console request, and the client, for ever."""
    from vm.api import server as virtapi_server

    monkeypatch.setattr(virtapi_server, "HANDSHAKE_TIMEOUT", 1.0)
    server, kube, _ = cluster
    ns, name = "default", f"hang-{uuid.uuid4().hex[:6]}"
    node = f"hanging-{uuid.uuid4().hex[:6]}"
    _vmi(kube, ns, name)
    with MuteHandler(kube) as handler:
        try:
            _place(kube, ns, name, node=node, handler_port=handler.port)
            started = time.monotonic()
            code, text = asyncio.run(_get_console(server, ns, name))
            waited = time.monotonic() - started
        finally:
            kube.delete(PODS, f"virt-handler-{name}", "kubevirt")
    assert code == 503, (code, text)
    assert json.loads(text)["message"] == "cannot reach the node handler: no answer in 1 s"
    assert waited < 10, waited
