"""The operator's HTTP side: health and metrics (plain HTTP), admission webhooks (TLS).

It runs on its own thread and event loop, next to kopf, on every replica: a webhook must
answer whichever replica the Service picks, leader or not. Webhook bodies are bounded and
the blocking lookups a webhook makes run in a worker thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import threading
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, generate_latest

logger = logging.getLogger(__name__)

MAX_REVIEW_BYTES = 3 * 1024 * 1024
LEADER = Gauge("rootdisk_operator_leader", "1 while this replica holds the leader Lease")
REVIEWS = Counter("rootdisk_operator_admission_reviews_total",
                  "Admission reviews answered", ["path", "allowed"])

Webhook = Callable[..., dict[str, Any]]
Exists = Callable[[str, str, str], bool]
Metadata = Callable[[str, str, str], "dict[str, Any] | None"]
FeatureGates = Callable[[], "frozenset[str]"]


class Server:
    def __init__(self, *, host: str, health_port: int, webhook_port: int | None,
                 webhooks: Mapping[str, Webhook], exists: Exists,
                 tls: ssl.SSLContext | None, metadata: Metadata | None = None,
                 feature_gates: FeatureGates | None = None) -> None:
        self.host, self.health_port, self.webhook_port = host, health_port, webhook_port
        self.webhooks, self.exists, self.tls = dict(webhooks), exists, tls
        self.metadata, self.feature_gates = metadata, feature_gates
        self.ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._runners: list[web.AppRunner] = []
        self._thread = threading.Thread(target=self._loop.run_forever, name="operator-http",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        self.ready.set()

    def stop(self) -> None:
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=30)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        if not self._loop.is_running() and not self._loop.is_closed():
            self._loop.close()  # its self-pipe sockets with it

    async def _start(self) -> None:
        health = web.Application()
        health.router.add_get("/healthz", self._healthz)
        health.router.add_get("/readyz", self._readyz)
        health.router.add_get("/metrics", self._metrics)
        await self._serve(health, self.health_port, None)
        if self.webhook_port is not None and self.webhooks:
            hooks = web.Application(client_max_size=MAX_REVIEW_BYTES)
            for path in self.webhooks:
                hooks.router.add_post(path, self._review)
            await self._serve(hooks, self.webhook_port, self.tls)

    async def _serve(self, app: web.Application, port: int, tls: ssl.SSLContext | None) -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, self.host, port, ssl_context=tls).start()
        self._runners.append(runner)
        logger.info("serving %s on %s:%d", "webhooks" if tls else "health and metrics",
                    self.host, port)

    async def _stop(self) -> None:
        for runner in self._runners:
            await runner.cleanup()

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok") if self.ready.is_set() else web.Response(status=503)

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _review(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except (ValueError, json.JSONDecodeError):
            return web.Response(status=400, text="expected an AdmissionReview JSON object")
        hook = self.webhooks[request.path]
        loop = asyncio.get_running_loop()
        try:
            answer = await loop.run_in_executor(
                None, lambda: hook(body, exists=self.exists, metadata=self.metadata,
                                   feature_gates=self.feature_gates))
        except Exception:
            logger.exception("webhook %s failed", request.path)
            return web.Response(status=500, text="webhook failed")
        allowed = bool((answer.get("response") or {}).get("allowed"))
        REVIEWS.labels(path=request.path, allowed=str(allowed).lower()).inc()
        return web.json_response(answer)
