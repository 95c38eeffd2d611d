"""virt-api's certificates on a real API server: its CA rotates in Secret
``virt-api-certs``, every caBundle it owns (APIService, both webhooks) holds the next CA
before it signs, an earlier version's ten-year CA migrates, peers holding the bundle of
before a rotation trust what the new CA signs (and a stranger's certificate is refused),
and, live, virt-api and a node handler renew their certificates in place and keep
talking across two rotations, through the API server and to each other."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ssl
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubeclient import Client
from kubeclient.resources import VMS
from localcluster.apiserver.threaded import ServerThread
from pki import certs, rotation, serving
from tests.fixtures.tls import handshake, signed_by, signer_index
from vm.api import certs as vm_certs
from vm.api import kube as api_kube
from vm.api.__main__ import main as virt_api_main
from vm.api.server import VirtAPI
from vm.handler.console import ConsoleServer, ConsoleSite
from vm.handler.kube import console_identity

from .conftest import CRD_FILES, CRDS, ROOT, kube_for, wait_served
from .virtapi_harness import NAMESPACES, NS, read_ca, register

T0 = dt.datetime.now(dt.UTC).replace(microsecond=0)
L = (vm_certs.CA_LIFETIME, vm_certs.LEAF_LIFETIME)  # upstream's 7 days and 24 h
HANDOVER = T0 + vm_certs.CA_LIFETIME / 2 + dt.timedelta(hours=1)
BASE = "/apis/subresources.kubevirt.io/v1"


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[Client]:
    thread = ServerThread(tmp_path / "api", bookmark_interval=0.5,
                          aggregation_check_interval=0.3)
    server = thread.start()
    client = kube_for(server)
    try:
        for name in CRD_FILES:
            client.create(CRDS, yaml.safe_load((ROOT / "manifests/crds" / name).read_text()))
        wait_served(client, "/apis/kubevirt.io/v1/virtualmachines")
        client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": NS}})
        yield client
    finally:
        client.api.close()
        thread.stop()


def ca_bundles(kube: Client) -> list[tuple[bytes, ...]]:
    """The CAs of every caBundle virt-api owns: the APIService's, then each webhook's."""
    apiservice = kube.get(api_kube.APISERVICES, api_kube.APISERVICE)
    webhooks = kube.get(api_kube.VALIDATING_WEBHOOKS, api_kube.WEBHOOK_CONFIG)
    assert apiservice is not None and webhooks is not None
    found = [apiservice["spec"]["caBundle"]] + [
        h["clientConfig"]["caBundle"] for h in webhooks["webhooks"]]
    assert len(found) == 3
    return [rotation.split_bundle(base64.b64decode(b)) for b in found]


def the_bundle(kube: Client) -> tuple[bytes, ...]:
    bundles = ca_bundles(kube)
    assert all(b == bundles[0] for b in bundles), "the caBundles differ"
    return bundles[0]


def secret(kube: Client) -> dict[str, Any]:
    found = kube.get(api_kube.SECRETS, api_kube.CERT_SECRET, NS)
    assert found is not None
    return found


def signer(leaf: serving.Issued, bundle: tuple[bytes, ...]) -> int:
    return signer_index(leaf.pair.cert_pem, bundle)


def test_the_ca_rotates_and_every_ca_bundle_holds_the_next_ca_before_it_signs(
        kube: Client) -> None:
    register(kube, 1)
    first = api_kube.issue_serving(kube, NS, lifetimes=L, now=T0)
    before = the_bundle(kube)
    assert len(before) == 2 and signer(first, before) == 1  # the next CA trusted already
    assert first.bundle == b"".join(before)  # what virt-api checks handlers against
    assert certs.not_after(first.pair.cert_pem) - T0 == L[1]  # no longer ten years
    version = secret(kube)["metadata"]["resourceVersion"]
    again = api_kube.issue_serving(kube, NS, lifetimes=L, now=T0 + dt.timedelta(hours=13))
    assert the_bundle(kube) == before and signer(again, before) == 1
    assert secret(kube)["metadata"]["resourceVersion"] == version  # nothing due, no write

    later = api_kube.issue_serving(kube, NS, lifetimes=L, now=HANDOVER)
    after = the_bundle(kube)
    assert len(after) == 3
    assert signer(later, before) == 0  # the CA every caBundle already held as next
    assert signer(later, after) == 1 and signer(first, after) == 2  # old ones still trusted


def test_peers_with_the_bundle_of_before_trust_the_new_ca_and_refuse_a_stranger(
        kube: Client) -> None:
    """With real handshakes: the API server holding the caBundle of before the rotation
    trusts virt-api's certificate from the new CA; a handler made before it lets that
    certificate in as virt-api's client certificate; a certificate for the same names
    from a CA of its own is refused by both, and virt-api refuses as a handler a peer
    serving another certificate of the same CA (its own)."""
    register(kube, 1)
    api_kube.issue_serving(kube, NS, lifetimes=L, now=T0)
    api_server_trusts = b"".join(the_bundle(kube))
    now = dt.datetime.now(dt.UTC)  # the handshakes' clock is the real one
    handler = console_identity(kube, NS)
    api_kube.issue_serving(kube, NS, lifetimes=L, now=HANDOVER)
    found = read_ca(kube, NS)
    assert found is not None
    new_ca, bundle_now = found
    assert new_ca.cert_pem == rotation.split_bundle(api_server_trusts)[0]
    names = certs.service_names(api_kube.SERVICE, NS)
    virt_api = certs.issue(ca=new_ca, common_name="virt-api", dns_names=names, now=now)
    front_proxy_ca = certs.make_ca(name="front-proxy", now=now)
    front_proxy = certs.issue(ca=front_proxy_ca, common_name="front-proxy-client", now=now)
    stranger_ca = certs.make_ca(name=vm_certs.CA_NAME, now=now)  # even the same name
    stranger = certs.issue(ca=stranger_ca, common_name="virt-api", dns_names=names,
                           ips=("127.0.0.1",), now=now)

    # the API server calls virt-api
    handshake(server_cert=virt_api, server_trusts=front_proxy_ca.cert_pem,
              client_cert=front_proxy, client_trusts=api_server_trusts,
              server_name=f"virt-api.{NS}.svc")
    with pytest.raises(ssl.SSLError):
        handshake(server_cert=stranger, server_trusts=front_proxy_ca.cert_pem,
                  client_cert=front_proxy, client_trusts=api_server_trusts,
                  server_name=f"virt-api.{NS}.svc")
    # virt-api calls the handler
    handler_name = vm_certs.handler_server_name(NS)
    handshake(server_cert=handler.pair, server_trusts=handler.bundle,
              client_cert=virt_api, client_trusts=bundle_now, server_name=handler_name)
    with pytest.raises(ssl.SSLError):
        handshake(server_cert=handler.pair, server_trusts=handler.bundle,
                  client_cert=stranger, client_trusts=bundle_now, server_name=handler_name)
    with pytest.raises(ssl.SSLError):
        handshake(server_cert=virt_api, server_trusts=handler.bundle,
                  client_cert=virt_api, client_trusts=bundle_now, server_name=handler_name)


def test_an_old_ten_year_secret_migrates_and_its_ca_signs_until_the_handover(
        kube: Client) -> None:
    old = certs.make_ca(name=vm_certs.CA_NAME, now=T0)  # as earlier versions made it
    old_leaf = certs.issue(ca=old, common_name="virt-api", now=T0)
    kube.create(api_kube.SECRETS, {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": api_kube.CERT_SECRET, "namespace": NS},
        "data": {k: base64.b64encode(v).decode() for k, v in (
            ("ca.crt", old.cert_pem), ("ca.key", old.key_pem),
            ("tls.crt", old_leaf.cert_pem), ("tls.key", old_leaf.key_pem))}}, NS)
    register(kube, 1)
    api_kube.publish_ca(kube, old.cert_pem)  # what the earlier version published
    assert read_ca(kube, NS) == (old, old.cert_pem)

    first = api_kube.issue_serving(kube, NS, lifetimes=L, now=T0)
    bundle = the_bundle(kube)
    assert bundle[1] == old.cert_pem and signer(first, bundle) == 1  # still the old CA
    assert certs.not_after(first.pair.cert_pem) - T0 == L[1]
    assert {"tls.crt", "tls.key"}.isdisjoint(secret(kube)["data"])  # the ten-year leaf

    later = api_kube.issue_serving(kube, NS, lifetimes=L, now=HANDOVER)
    after = the_bundle(kube)
    assert signer(later, after) == 1 and after[1] == bundle[0]  # the next one took over
    assert after[2] == old.cert_pem  # retired, still trusted while it is valid


def test_the_handlers_get_a_certificate_and_never_the_ca_key(kube: Client) -> None:
    """Each issue of virt-api's certificate issues the handlers' one into their own Secret:
    a serving-only certificate for the handlers' name from the CA that signs now (the new
    one after a handover), the bundle to check virt-api against, and no key but its own."""
    register(kube, 1)
    first = api_kube.issue_serving(kube, NS, lifetimes=L, now=T0)
    handlers = console_identity(kube, NS)
    found = kube.get_or_none(api_kube.SECRETS, api_kube.HANDLER_SECRET, NS)
    assert found is not None and set(found["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    ca = read_ca(kube, NS)
    assert ca is not None
    keys = {ca[0].key_pem, *(v for k, v in rotation.secret_data(secret(kube))[0].items()
                             if k.endswith(".key"))}
    assert handlers.pair.key_pem not in keys
    bundle = the_bundle(kube)
    assert handlers.bundle == first.bundle and signer(handlers, bundle) == signer(first, bundle)
    leaf = x509.load_pem_x509_certificate(handlers.pair.cert_pem)
    assert leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == \
        vm_certs.HANDLER_CN
    assert vm_certs.handler_server_name(NS) in leaf.extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert list(leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH]
    assert certs.not_after(handlers.pair.cert_pem) - T0 == L[1]

    later = api_kube.issue_serving(kube, NS, lifetimes=L, now=HANDOVER)
    renewed, after = console_identity(kube, NS), the_bundle(kube)
    assert renewed.pair.cert_pem != handlers.pair.cert_pem and renewed.bundle == later.bundle
    assert signer(renewed, after) == signer(later, after) != signer(handlers, after)


@pytest.mark.parametrize(("env", "said"), [
    ({"VIRT_API_CERT_LIFETIME": "soon"}, "VIRT_API_CERT_LIFETIME: 'soon' is not a number"),
    ({"VIRT_API_CA_CERT_LIFETIME": "100", "VIRT_API_CERT_LIFETIME": "30"},
     "at most a quarter of the CA lifetime"),
])
def test_a_bad_lifetime_setting_stops_virt_api_naming_the_variable(
        env: dict[str, str], said: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SystemExit) as stop:
        virt_api_main(["--kubeconfig", "/nonexistent"])
    assert stop.value.code == 2
    assert said in capsys.readouterr().err


# -- live: two rotations -------------------------------------------------------------------

SHORT = (dt.timedelta(seconds=20), dt.timedelta(seconds=5))
"""Upstream's ratio shortened: the CA hands over every ~10 s, certificates renewed every
~2.5 s, so two rotations take about half a minute."""


async def peer_der(port: int, path: str, ctx: ssl.SSLContext, expect: int,
                   server_hostname: str = "127.0.0.1") -> bytes:
    """GET ``path`` over a new TLS connection to 127.0.0.1:``port``; the status must be
    ``expect``; the server's certificate (DER)."""
    async with asyncio.timeout(10):
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=ctx, server_hostname=server_hostname)
        try:
            der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
            writer.write(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
            await writer.drain()
            status = await reader.readline()
        finally:
            writer.close()
    assert status.split()[1:2] == [str(expect).encode()], status
    assert der is not None
    return bytes(der)


@pytest.mark.slow
def test_virt_api_and_a_handler_keep_talking_across_two_rotations(kube: Client) -> None:
    """virt-api as ``python -m vm.api`` wires it and a node handler's console server as
    the handler wires it, with a 20 s CA and 5 s certificates. Every ~0.3 s, until the
    CA has handed over twice and both servers present a certificate of the third CA:
    the API server reaches virt-api (aggregated discovery, the VM webhook on a dry-run
    create), virt-api's own client context reaches the handler's console endpoint and
    is let in as virt-api (404: no such VMI, rather than 401 or a refused handshake).
    Nothing may fail on the way."""
    node = "node1"

    def issue() -> serving.Issued:
        return api_kube.issue_serving(kube, NS, lifetimes=SHORT)

    async def run() -> tuple[int, list[bytes]]:
        first = await asyncio.to_thread(issue)
        proxy = await asyncio.to_thread(api_kube.front_proxy, kube)
        tls = vm_certs.virt_api_tls(issue, first, proxy, lifetime=SHORT[1])
        app = VirtAPI(kube, proxy, tls.handlers, NS).app()
        app.cleanup_ctx.append(tls.renewal.keep_fresh)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls.server).start()
        port = int(runner.addresses[0][1])

        def handler_issue() -> serving.Issued:
            return console_identity(kube, NS)

        site = ConsoleSite(ConsoleServer(kube, node=node, socket_dir="/nonexistent"),
                           handler_issue, lifetime=SHORT[1])
        await site.start(await asyncio.to_thread(handler_issue), address="127.0.0.1",
                         port=0)
        await asyncio.to_thread(register, kube, port)
        await asyncio.to_thread(api_kube.publish_ca, kube, first.bundle)
        await asyncio.to_thread(wait_served, kube, BASE)
        vm = yaml.safe_load((ROOT / "manifests/examples/vm-datavolume.yaml").read_text())
        vm["metadata"] = {"name": f"v-{uuid.uuid4().hex[:6]}"}
        handler_path = "/v1/namespaces/default/virtualmachineinstances/nope/console?uid=x"
        cas: list[bytes] = []
        rounds = 0
        deadline = time.monotonic() + 90
        try:
            while True:
                found = await asyncio.to_thread(read_ca, kube, NS)
                assert found is not None
                if not cas or cas[-1] != found[0].cert_pem:
                    cas.append(found[0].cert_pem)
                await asyncio.to_thread(kube.request, "GET", BASE)
                await asyncio.to_thread(kube.request, "POST", VMS.path("default"), body=vm,
                                        query={"dryRun": "All"})
                handler_der = await peer_der(site.port, handler_path, tls.handlers, 404,
                                             vm_certs.handler_server_name(NS))
                virt_api_der = await peer_der(  # as the API server sees it
                    port, "/healthz", ssl.create_default_context(cadata=found[1].decode()),
                    200, server_hostname=f"{api_kube.SERVICE}.{NS}.svc")
                rounds += 1
                if len(cas) >= 3 and all(
                        signed_by(ssl.DER_cert_to_PEM_cert(d).encode(), cas[-1])
                        for d in (handler_der, virt_api_der)):
                    return rounds, cas
                assert time.monotonic() < deadline, f"{len(cas)} CAs seen in {rounds} rounds"
                await asyncio.sleep(0.3)
        finally:
            await site.stop()
            await runner.cleanup()

    rounds, cas = asyncio.run(run())
    assert len(set(cas)) == len(cas) >= 3 and rounds > 10

