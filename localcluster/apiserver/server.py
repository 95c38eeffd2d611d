"""The embedded API server: wiring of store, registry, controllers and HTTP, and its
Python API for the rest of localcluster.

Use::

    server = APIServer(data_dir, port=0)
    await server.start()          # https://127.0.0.1:<port>, kubeconfig in data_dir
    token = server.token_for_service_account("ns", "default")
    server.set_log_provider(provider)   # kubelet: serves GET pods/<name>/log
    await server.stop()

``threaded.running_server`` runs the same in a background thread for synchronous code.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import json
import logging
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage

from apiservice import frontproxy

from . import kubeconfig
from .admission.webhooks import ServiceResolver
from .aggregation.frontproxy_pki import PROXY_CLIENT_NAME, ensure_front_proxy
from .aggregation.proxy import Aggregator
from .audit import AuditLog
from .auth import rbac_defaults
from .auth.authn import Authenticator
from .backend import Backend
from .controllers import Controllers
from .errors import APIServerError, bad_request
from .handlers import Handlers, LogProvider, Settings, error_response
from .kinds import apiservices
from .kinds.builtin_types import BUILTIN_TYPES, SYSTEM_NAMESPACES
from .kinds.registry import Registry
from .storage.store import Store
from .storage.watchcache import WatchCache
from .streams.remotecommand import ExecProvider
from .tls import TLSFiles, ensure_tls

logger = logging.getLogger(__name__)


def path_error(raw_path: str) -> str:
    """Why a request path (as received, percent-encoded) is refused, or "".

    A segment that is ``.`` or ``..`` once percent-decoded (``%2e%2e``, ``.%2E``…), or
    that holds an encoded ``/`` (``%2F``), is refused: such a path names one thing to the
    server's own parsing (the RBAC attributes are read from the decoded path, segment by
    segment) and may name another to whatever reads it next: a URL library resolving the
    dot segments, a backend splitting on the decoded ``/``. No object name can be ``.``,
    ``..`` or contain ``/`` (kube-apiserver's path-segment rule), so no client that
    names an object sends one.
    """
    for segment in raw_path.split("/"):
        decoded = urllib.parse.unquote(segment)
        if decoded in (".", ".."):
            return f"a path segment may not be '{decoded}'"
        if "/" in decoded:
            return "a path segment may not contain '/' (%2F)"
    return ""


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
http_logger = logging.getLogger(__name__ + ".http")


class _MalformedRequests(logging.Filter):
    """aiohttp logs each request it cannot parse (a NUL or another control character in a
    header, a header line over 8190 bytes, a bad request line) at ERROR with a traceback
    and the start of the offending line, a bearer token's included. Anyone who can connect
    could fill the log that way. Such a request is answered 400 by aiohttp and is the
    client's mistake: one DEBUG line naming the kind of error, no traceback, no content
    (as aiohttp itself does for a bad method, and Go's server, silent)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, BadHttpMessage):
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        record.msg, record.args = "%s: malformed request refused (%s)", (
            record.getMessage(), type(exc).__name__)
        record.exc_info = record.exc_text = None
        return http_logger.isEnabledFor(logging.DEBUG)


http_logger.addFilter(_MalformedRequests())


@web.middleware
async def refuse_ambiguous_paths(request: web.Request,
                                 handler: Handler) -> web.StreamResponse:
    """400 for a path :func:`path_error` refuses, before anything reads the path."""
    why = path_error(request.rel_url.raw_path)
    if why:
        return error_response(bad_request(f"the request path is invalid: {why}"))
    return await handler(request)


class APIServer:
    def __init__(self, data_dir: Path | str, *, port: int = 0, host: str = "127.0.0.1",
                 bookmark_interval: float = 10.0, history_limit: int = 20000,
                 max_body_bytes: int = 3 * 1024 * 1024,
                 aggregation_check_interval: float = 10.0) -> None:
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port
        self.settings = Settings(max_body_bytes=max_body_bytes,
                                 bookmark_interval=bookmark_interval)
        self.history_limit = history_limit
        self._runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.tls: TLSFiles | None = None
        self.store: Store | None = None
        self.registry = Registry()
        self.handlers: Handlers | None = None
        self.backend: Backend | None = None
        self.authenticator: Authenticator | None = None
        self._log_provider: LogProvider | None = None
        self._exec_provider: ExecProvider | None = None
        self._service_resolver: ServiceResolver | None = None
        self.aggregator: Aggregator | None = None
        self.aggregation_check_interval = aggregation_check_interval

    # -- public attributes ---------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    @property
    def kubeconfig_path(self) -> Path:
        return self.data_dir / "kubeconfig"

    @property
    def ca_path(self) -> Path:
        return self.data_dir / "pki" / "ca.crt"

    @property
    def admin_token(self) -> str:
        if self.authenticator is None:
            raise APIServerError("the server is not started")
        return self.authenticator.admin_token

    def token_for_service_account(self, namespace: str, name: str, *, pod_name: str = "",
                                  pod_uid: str = "", audiences: tuple[str, ...] = (),
                                  expiration_seconds: int = 3600) -> str:
        """A signed token for ``system:serviceaccount:<namespace>:<name>``, valid for
        ``expiration_seconds`` while the ServiceAccount (and the pod ``pod_name``/``pod_uid``
        when given: what the kubelet mounts) exists. Safe to call from any thread; raises
        LookupError when the ServiceAccount does not exist."""
        if self.authenticator is None or self.store is None:
            raise APIServerError("the server is not started")
        sa = self.store.get("/serviceaccounts", namespace, name)
        if sa is None:
            raise LookupError(f'serviceaccount "{namespace}/{name}" not found')
        return self.authenticator.tokens.mint(
            namespace=namespace, service_account=name,
            service_account_uid=str(sa.obj["metadata"]["uid"]), now=int(time.time()),
            expiration_seconds=expiration_seconds, audiences=audiences, pod_name=pod_name,
            pod_uid=pod_uid)

    def set_log_provider(self, provider: LogProvider | None) -> None:
        """Serve ``GET pods/<pod>/log`` from ``provider(namespace=, pod=, container=,
        follow=, tail_lines=, previous=, timestamps=, since_seconds=, limit_bytes=)``, an
        async iterator of bytes. Raise LookupError/FileNotFoundError for "no logs"."""
        self._log_provider = provider
        if self.handlers is not None:
            self.handlers.log_provider = provider

    def set_exec_provider(self, provider: ExecProvider | None) -> None:
        """Serve pods/<pod>/exec and pods/<pod>/attach (WebSocket) through ``provider``
        (see streams/remotecommand.py)."""
        self._exec_provider = provider
        if self.handlers is not None:
            self.handlers.exec_provider = provider

    def set_service_resolver(self, resolver: ServiceResolver | None) -> None:
        """How admission webhooks' ``service`` references become (host, port).

        ``resolver(namespace, name, port)`` runs in a worker thread (it may block, even on
        a request to this server). Without one, the server resolves from the stored
        Endpoints, then the Service's targetPort on 127.0.0.1."""
        self._service_resolver = resolver
        if self.backend is not None:
            self.backend.webhooks.resolver = resolver

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.tls = ensure_tls(self.data_dir / "pki")
        if self.authenticator is None:
            self.authenticator = Authenticator(self.data_dir)
        self.store = Store(self.data_dir / "store.db", history_limit=self.history_limit)
        for rt in BUILTIN_TYPES:
            self.registry.add(rt)
        watchcache = WatchCache(self.store, capacity=self.history_limit)
        self.backend = Backend(store=self.store, registry=self.registry, watchcache=watchcache)
        self.backend.webhooks.resolver = self._service_resolver
        self.backend.audit = AuditLog(self.data_dir / "audit.log")
        controllers = Controllers(self.backend, self.registry,
                                  root_ca_pem=self.tls.ca_pem().decode())
        self._bootstrap(self.backend)
        front_proxy = ensure_front_proxy(self.data_dir / "pki")
        self._bootstrap_aggregation(self.backend, front_proxy.ca_pem())
        self.aggregator = Aggregator(backend=self.backend, pki=front_proxy,
                                     check_interval=self.aggregation_check_interval)
        self.handlers = Handlers(backend=self.backend, registry=self.registry,
                                 authenticator=self.authenticator, settings=self.settings)
        self.handlers.log_provider = self._log_provider
        self.handlers.aggregator = self.aggregator
        self.handlers.exec_provider = self._exec_provider
        app = web.Application(client_max_size=self.settings.max_body_bytes + 64 * 1024,
                              middlewares=[refuse_ambiguous_paths])
        app.router.add_route("*", "/{tail:.*}", self.handlers.handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False,
                                     shutdown_timeout=1.0, logger=http_logger)
        await self._runner.setup()
        ports = [self.port]
        if self.port == 0 and (previous := self._previous_port()):
            ports.insert(0, previous)  # keep the URL of existing kubeconfigs when free
        for i, port in enumerate(ports):
            site = web.TCPSite(self._runner, self.host, port,
                               ssl_context=self.tls.server_context(), backlog=1024)
            try:
                await site.start()
                break
            except OSError:
                if i == len(ports) - 1:
                    raise
                logger.info("port %d of the previous run is taken; picking another", port)
        server = site._server
        sockets = getattr(server, "sockets", None) if server is not None else None
        if sockets:
            self.port = sockets[0].getsockname()[1]
        kubeconfig.write(self.kubeconfig_path, kubeconfig.render(
            server=self.url, ca_pem=self.tls.ca_pem(), token=self.authenticator.admin_token))
        self._tasks.append(asyncio.get_running_loop().create_task(controllers.run()))
        self._tasks.append(asyncio.get_running_loop().create_task(self.aggregator.run()))
        logger.info("API server at %s (kubeconfig %s)", self.url, self.kubeconfig_path)

    def _previous_port(self) -> int:
        try:
            config = json.loads(self.kubeconfig_path.read_text())
            server = config["clusters"][0]["cluster"]["server"]
            return int(server.rsplit(":", 1)[1])
        except (OSError, ValueError, KeyError, IndexError):
            return 0

    def _bootstrap(self, backend: Backend) -> None:
        ns_rt = self.registry.get("", "v1", "namespaces")
        sa_rt = self.registry.get("", "v1", "serviceaccounts")
        role_rt = self.registry.get("rbac.authorization.k8s.io", "v1", "clusterroles")
        binding_rt = self.registry.get("rbac.authorization.k8s.io", "v1", "clusterrolebindings")
        assert ns_rt and sa_rt and role_rt and binding_rt
        for name in SYSTEM_NAMESPACES:
            backend.create_internal(ns_rt, None, {"metadata": {"name": name}})
        for _, stored in backend.store.items(ns_rt.group_resource):
            name = stored.obj["metadata"]["name"]
            if not stored.obj["metadata"].get("deletionTimestamp"):
                backend.create_internal(sa_rt, name, {"metadata": {"name": "default"}})
        for obj in rbac_defaults.DEFAULT_RBAC_OBJECTS:
            rt = binding_rt if obj["kind"] == "ClusterRoleBinding" else role_rt
            backend.create_internal(rt, None, copy.deepcopy(obj))

    def _bootstrap_aggregation(self, backend: Backend, proxy_ca_pem: str) -> None:
        """The built-in local APIServices, and what aggregated APIs' backends read to
        trust the front proxy: ConfigMap kube-system/extension-apiserver-authentication
        and the Role that lets them read it (bind it to the backend's ServiceAccount)."""
        api_rt = self.registry.get("apiregistration.k8s.io", "v1", "apiservices")
        cm_rt = self.registry.get("", "v1", "configmaps")
        role_rt = self.registry.get("rbac.authorization.k8s.io", "v1", "roles")
        assert api_rt and cm_rt and role_rt and self.tls
        builtin: dict[str, list[str]] = {}
        for rt in BUILTIN_TYPES:  # not CRD groups (upstream registers those as they come)
            versions = builtin.setdefault(rt.group, [])
            if rt.version not in versions:
                versions.append(rt.version)
        for obj in apiservices.local_apiservices(builtin):
            status = obj.pop("status")
            backend.create_internal(api_rt, None, obj)
            backend.mutate_internal(api_rt.group_resource, "", obj["metadata"]["name"],
                                    functools.partial(_with_status, status=status))
        data = {
            frontproxy.KEY_CLIENT_CA: proxy_ca_pem,
            frontproxy.KEY_USER_CLIENT_CA: self.tls.ca_pem().decode(),
            frontproxy.KEY_USERNAME_HEADERS: json.dumps(["X-Remote-User"]),
            frontproxy.KEY_GROUP_HEADERS: json.dumps(["X-Remote-Group"]),
            frontproxy.KEY_EXTRA_PREFIXES: json.dumps(["X-Remote-Extra-"]),
            frontproxy.KEY_ALLOWED_NAMES: json.dumps([PROXY_CLIENT_NAME]),
        }
        ns, name = frontproxy.CONFIGMAP_NAMESPACE, frontproxy.CONFIGMAP_NAME
        backend.create_internal(cm_rt, ns, {"metadata": {"name": name}, "data": data})
        backend.mutate_internal(cm_rt.group_resource, ns, name, lambda o: {**o, "data": data})
        backend.create_internal(role_rt, ns, {
            "metadata": {"name": "extension-apiserver-authentication-reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                       "resourceNames": [name], "verbs": ["get", "list", "watch"]}]})

    async def stop(self) -> None:
        if self.handlers is not None:
            self.handlers.closing.set()
        if self.backend is not None:
            self.backend.watchcache.close_all()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self._runner is not None:
            await asyncio.sleep(0.05)  # let closing watch streams send their last bytes
            server = self._runner.server
            for conn in list(getattr(server, "connections", []) if server else []):
                transport = conn.transport
                if transport is not None:
                    # Idle keep-alive clients would hold a TLS shutdown open past the loop.
                    transport.abort()
            await self._runner.cleanup()
            self._runner = None
            await asyncio.sleep(0)
        if self.store is not None:
            self.store.close()
            self.store = None
        logger.info("API server at %s stopped", self.url)

    async def __aenter__(self) -> APIServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()


def _with_status(obj: dict[str, Any], *, status: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "status": status}
