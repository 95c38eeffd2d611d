"""pki.serving: a short-lived certificate is issued again into the running server (new
connections see a new one, no restart), a failed renewal is tried again, and the
bundle a renewal brings is added to the contexts that check peers."""

from __future__ import annotations

import asyncio
import datetime as dt
import socket
import ssl
import time

from aiohttp import web
from cryptography import x509

from pki import certs, serving


def peer_serial(port: int, ca: bytes, *, client: certs.KeyPair | None = None,
                tmp: str = "") -> int:
    ctx = ssl.create_default_context(cadata=ca.decode())
    if client is not None:
        ctx.load_cert_chain(*certs.write_pair(tmp, client.cert_pem, client.key_pem))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="server.ns.svc") as s:
        der = s.getpeercert(binary_form=True)
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        # TLS 1.3: the server checks the client's certificate after the client's side of
        # the handshake is done; a refusal shows as a closed connection, not an answer
        answer = s.recv(5)
    assert answer == b"HTTP/", f"the server did not answer: {answer!r}"
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_the_serving_certificate_is_renewed_into_the_running_server(tmp_path) -> None:
    """A 4 s certificate: the running server presents a new one to new connections after
    about 2 s, without a restart; the first renewal fails (any error) and is tried
    again; the bundle that came with the renewal lets in a client the server's first
    trust did not know."""
    now = dt.datetime.now(dt.UTC)
    ca, peers_then, peers_later = (certs.make_ca(name=n, now=now) for n in ("ca", "p1", "p2"))
    life = dt.timedelta(seconds=4)
    issued: list[int] = []
    calls = 0

    def issue() -> serving.Issued:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise KeyError("a failure nobody planned for")
        pair = certs.issue(ca=ca, common_name="server", dns_names=("server.ns.svc",),
                           now=dt.datetime.now(dt.UTC), validity=life)
        issued.append(x509.load_pem_x509_certificate(pair.cert_pem).serial_number)
        return serving.Issued(pair, peers_then.cert_pem if calls == 1 else
                              peers_later.cert_pem)

    later_client = certs.issue(ca=peers_later, common_name="client", now=now)

    async def run() -> tuple[int, int]:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH,
                                         cadata=peers_then.cert_pem.decode())
        ctx.verify_mode = ssl.CERT_REQUIRED
        renewal = serving.Serving(issue, lifetime=life, contexts=(ctx,), trusting=(ctx,))
        renewal.load(issue())
        app = web.Application()
        app.cleanup_ctx.append(renewal.keep_fresh)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        client = certs.issue(ca=peers_then, common_name="client", now=now)
        try:
            before = await asyncio.to_thread(peer_serial, port, ca.cert_pem, client=client,
                                             tmp=str(tmp_path / "a"))
            for _ in range(80):  # bounded: 8 s
                await asyncio.sleep(0.1)
                if len(issued) > 1:
                    break
            after = await asyncio.to_thread(peer_serial, port, ca.cert_pem,
                                            client=later_client, tmp=str(tmp_path / "b"))
        finally:
            await runner.cleanup()
        return before, after

    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    before, after = asyncio.run(run())
    assert calls >= 3 and len(issued) >= 2
    assert before == issued[0] and after == issued[-1] and after != before


def test_a_renewal_that_brings_the_certificate_already_served_is_tried_again_soon() -> None:
    """A side that reads a certificate another one issues (a node handler reading what
    virt-api wrote) can come before that one has renewed it: the same certificate is not
    loaded again, and the next look comes a tenth of the lifetime later (0.5 s here),
    until a new certificate is there."""
    now = dt.datetime.now(dt.UTC)
    ca = certs.make_ca(name="ca", now=now)
    life = dt.timedelta(seconds=5)

    def pair(validity: dt.timedelta) -> serving.Issued:
        return serving.Issued(certs.issue(ca=ca, common_name="server", now=now,
                                          validity=validity))

    served = pair(life / 2 + dt.timedelta(seconds=0.1))  # due for renewal in 1 s
    newer = pair(life)
    looks: list[float] = []
    loads: list[bytes] = []

    def issue() -> serving.Issued:
        looks.append(time.monotonic())
        return served if len(looks) < 3 else newer

    class Counted(serving.Serving):
        def load(self, issued: serving.Issued) -> None:
            loads.append(issued.pair.cert_pem)
            super().load(issued)

    async def run() -> None:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        renewal = Counted(issue, lifetime=life, contexts=(ctx,))
        renewal.load(served)
        task = asyncio.create_task(renewal.run())
        try:
            for _ in range(60):  # bounded: 6 s
                await asyncio.sleep(0.1)
                if len(loads) > 1:
                    break
        finally:
            task.cancel()

    asyncio.run(run())
    assert loads == [served.pair.cert_pem, newer.pair.cert_pem]
    assert len(looks) == 3
    assert 0.4 <= looks[1] - looks[0] < 0.9 and 0.4 <= looks[2] - looks[1] < 0.9
