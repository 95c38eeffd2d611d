"""The CLI's console: the WebSocket of ``virtualmachineinstances/console`` wired to the
terminal (raw mode, Ctrl+] detaches), and ``--log``: the launcher pod's
``guest-console-log`` container log, for scripts.

The log is what the guest wrote. Printed to a terminal, its control characters are shown
as ``cat -v`` would rather than obeyed (``--raw`` obeys them): a guest must not set the
viewer's clipboard (OSC 52), or make the terminal answer a report request by typing into
the viewer's shell once the command has returned. Piped, the bytes pass as they are."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import ssl
import sys
import termios
import time
import tty
from typing import Any
from urllib.parse import quote

import aiohttp

from apiservice.refusal import keep_refusal, last_refusal
from kubeclient import Client, KubeError
from kubeclient.resources import PODS, VMIS
from vocab import kubevirt as names

ESCAPE = b"\x1d"  # Ctrl+]
SUB = names.SUBRESOURCE_PATH


def _ssl_and_headers(kube: Client) -> tuple[ssl.SSLContext, dict[str, str], str]:
    cfg = kube.api.configuration
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.ssl_ca_cert else \
        ssl.create_default_context()
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cfg.cert_file and cfg.key_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    headers = {}
    for setting in (cfg.auth_settings() or {}).values():
        if setting.get("in") == "header" and setting.get("value"):
            headers[str(setting["key"]).capitalize()] = str(setting["value"])
    return ctx, headers, str(cfg.host).rstrip("/")


def _wait_running(kube: Client, ns: str, name: str, timeout: float) -> dict[str, Any]:
    """The VMI once it is Running, as virtctl waits for it; said once on stderr, so a
    misspelt name is not a silent wait."""
    deadline = time.monotonic() + timeout
    said = False
    while True:
        vmi = kube.get_or_none(VMIS, name, ns)
        phase = ((vmi or {}).get("status") or {}).get("phase")
        if phase == "Running":
            return vmi  # type: ignore[return-value]
        if not said:
            print(f"waiting up to {timeout:.0f} s for VMI {ns}/{name} to be running (now:"
                  f" {phase or 'no such VMI'}; --timeout sets the wait)", file=sys.stderr)
            said = True
        if time.monotonic() > deadline:
            raise SystemExit(f"rootdisk console: VMI {ns}/{name} is not running "
                             f"(phase {phase or 'absent'}) after {timeout:.0f} s")
        time.sleep(1)


_CONTROL = re.compile("[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f-\x9f\udc80-\udc9f]")
"""C0 but tab, newline and CR; DEL; C1 (U+0080..U+009F); lone bytes 0x80..0x9F (decoded
with surrogateescape), which an 8-bit terminal takes for C1."""


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20 or code == 0x7F:
        return "^" + chr(code ^ 0x40)
    return f"\\x{code & 0xFF:02x}"


def visible(data: bytes) -> bytes:
    """``data`` with every control character but newline, carriage return and tab made
    visible, as ``cat -v`` would: C0 and DEL as ``^X``, C1 as ``\\x9b``; everything
    else, valid UTF-8 or not, unchanged (pure)."""
    text = data.decode("utf-8", errors="surrogateescape")
    return _CONTROL.sub(_shown, text).encode("utf-8", errors="surrogateescape")


def print_log(kube: Client, ns: str, name: str, *, raw: bool = False) -> int:
    vmi = kube.get_or_none(VMIS, name, ns)
    if vmi is None:
        print(f"rootdisk console: VMI {ns}/{name} does not exist", file=sys.stderr)
        return 1
    pods = kube.list(PODS, ns, labelSelector=f"{names.LABEL_CREATED_BY}={vmi['metadata']['uid']}")
    pods = [p for p in pods if not ((p["metadata"].get("annotations") or {}).get(
        names.ANN_EPHEMERAL_PROVISIONING))]
    if not pods:
        print(f"rootdisk console: VMI {ns}/{name} has no launcher pod yet", file=sys.stderr)
        return 1
    pod = pods[0]["metadata"]["name"]
    try:
        resp = kube.api.call_api(
            f"/api/v1/namespaces/{quote(ns)}/pods/{quote(pod)}/log", "GET",
            query_params=[("container", "guest-console-log")], auth_settings=["BearerToken"],
            _preload_content=False, _request_timeout=60)
    except Exception as err:  # the client raises ApiException and urllib3 errors
        print(f"rootdisk console: cannot read the log of {pod}: {err}", file=sys.stderr)
        return 1
    data = resp[0].data if isinstance(resp, tuple) else resp.data
    if not raw and sys.stdout.isatty():
        data = visible(data)
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return 0


def attach(kube: Client, ns: str, name: str, *, timeout: float) -> int:
    try:
        _wait_running(kube, ns, name, timeout)
    except KubeError as err:
        print(f"rootdisk console: {err.message}", file=sys.stderr)
        return 1
    ctx, headers, host = _ssl_and_headers(kube)
    url = f"{host}{SUB}/namespaces/{quote(ns)}/virtualmachineinstances/{quote(name)}/console"
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd) if os.isatty(fd) else None
    try:
        if saved is not None:
            tty.setraw(fd)
        return asyncio.run(_session(name, url, ctx, headers, fd))
    finally:
        if saved is not None:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        print("", file=sys.stderr)


async def _session(name: str, url: str, ctx: ssl.SSLContext, headers: dict[str, str],
                   fd: int) -> int:
    """The console over its WebSocket (the terminal raw by now: lines end in CR LF)."""
    loop = asyncio.get_running_loop()
    # keep_refusal: the API server's or virt-api's reason, which ws_connect drops
    async with aiohttp.ClientSession(middlewares=(keep_refusal,)) as session:
        try:
            ws = await session.ws_connect(url, ssl=ctx, headers=headers,
                                          protocols=(names.PLAIN_PROTOCOL,))
        except aiohttp.WSServerHandshakeError as err:
            said = last_refusal()
            print(f"rootdisk console: {err.status} {(said and said.reason) or err.message}",
                  file=sys.stderr, end="\r\n")
            return 1
        print(f"Successfully connected to {name} console. The escape sequence is ^]",
              file=sys.stderr, end="\r\n")
        stdin_q: asyncio.Queue[bytes] = asyncio.Queue()

        def readable() -> None:
            data = os.read(fd, 1024)
            stdin_q.put_nowait(data)

        loop.add_reader(fd, readable)
        try:
            async def up() -> None:
                while True:
                    data = await stdin_q.get()
                    if not data or ESCAPE in data:
                        return
                    await ws.send_bytes(data)

            async def down() -> None:
                async for msg in ws:
                    if msg.type == aiohttp.WSMsgType.BINARY:
                        sys.stdout.buffer.write(msg.data)
                        sys.stdout.flush()
                    elif msg.type != aiohttp.WSMsgType.TEXT:
                        return

            tasks = [asyncio.create_task(up()), asyncio.create_task(down())]
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in tasks:
                t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            loop.remove_reader(fd)
            await ws.close()
    return 0
