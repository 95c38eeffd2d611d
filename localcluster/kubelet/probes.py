"""Readiness and liveness probes: when to probe, what a result means, and the probe.

``ProbeTracker`` is the pure part: it follows Kubernetes' timing fields
(initialDelaySeconds, periodSeconds, timeoutSeconds, successThreshold,
failureThreshold) and turns results into a verdict. ``run_probe`` performs httpGet and
tcpSocket probes against the pod's own address (servers in pods bind their pod IP).
``exec`` probes run the command in the container (its namespaces and confinement,
as ``kubectl exec`` does) through the ``exec_runner`` the worker passes; ``grpc``
probes are not run and count as passing.
"""

from __future__ import annotations

import functools
import http.client
import logging
import socket
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)


@dataclass
class ProbeTracker:
    spec: Mapping[str, Any]
    started: float
    """Monotonic time the container started."""
    ok: bool = False
    """Current verdict: ready (readiness) / not failing (liveness)."""
    next_at: float = 0.0
    successes: int = 0
    failures: int = 0

    def __post_init__(self) -> None:
        self.next_at = self.started + float(self.spec.get("initialDelaySeconds") or 0)

    @property
    def timeout(self) -> float:
        return float(self.spec.get("timeoutSeconds") or 1)

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def record(self, success: bool, now: float) -> bool:
        """Take one result; returns the (possibly changed) verdict."""
        self.next_at = now + float(self.spec.get("periodSeconds") or 10)
        if success:
            self.successes += 1
            self.failures = 0
            if self.successes >= int(self.spec.get("successThreshold") or 1):
                self.ok = True
        else:
            self.failures += 1
            self.successes = 0
            if self.failures >= int(self.spec.get("failureThreshold") or 3):
                self.ok = False
        return self.ok


def _port(value: Any, container: Mapping[str, Any]) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    for p in container.get("ports") or []:
        if p.get("name") == value:
            return int(p["containerPort"])
    raise ValueError(f"probe port {value!r} names no container port")


@functools.cache
def _probe_tls() -> ssl.SSLContext:
    """The one client context of HTTPS probes, built once: as the kubelet, no server
    verification, so no CA bundle either (loading the system's on every probe was most
    of an idle cluster's CPU)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


ExecRunner = Callable[[Sequence[str], float], bool]
"""Runs a command in the container with a timeout; True when it exited 0."""


def run_probe(probe: Mapping[str, Any], *, pod_ip: str, container: Mapping[str, Any],
              timeout: float, exec_runner: ExecRunner | None = None) -> bool:
    """One probe; True on success."""
    try:
        if probe.get("httpGet"):
            get = probe["httpGet"]
            host = get.get("host") or pod_ip
            port = _port(get.get("port"), container)
            conn: http.client.HTTPConnection
            if (get.get("scheme") or "HTTP").upper() == "HTTPS":
                conn = http.client.HTTPSConnection(host, port, timeout=timeout,
                                                   context=_probe_tls())
            else:
                conn = http.client.HTTPConnection(host, port, timeout=timeout)
            try:
                headers = {h["name"]: h["value"] for h in get.get("httpHeaders") or []}
                conn.request("GET", get.get("path") or "/", headers=headers)
                return 200 <= conn.getresponse().status < 400
            finally:
                conn.close()
        if probe.get("tcpSocket"):
            tcp = probe["tcpSocket"]
            port = _port(tcp.get("port"), container)
            with socket.create_connection((tcp.get("host") or pod_ip, port), timeout=timeout):
                return True
        if probe.get("exec"):
            command = (probe["exec"] or {}).get("command") or []
            if not command:
                raise ValueError("exec probe without a command")
            if exec_runner is None:
                logger.debug("exec probe with no container to run in: failing it")
                return False
            return exec_runner([str(c) for c in command], timeout)
        if probe.get("grpc"):
            logger.debug("grpc probes are not run by localcluster: assuming success")
            return True
    except (OSError, ValueError, http.client.HTTPException) as err:
        logger.debug("probe failed: %s", err)
        return False
    return True
