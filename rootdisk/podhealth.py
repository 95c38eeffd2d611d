"""Pods that will not come up by waiting longer: a command that waits on the cluster
(``make demo``, ``rootdisk up``'s users) names them, with their reason and last log
lines, within seconds instead of waiting out its whole timeout in silence.

``stuck`` is a pure decision over pod objects; ``describe`` reads the container's log.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# Waiting reasons that no amount of waiting fixes (the kubelet's own words).
STUCK_WAITING = frozenset({
    "CrashLoopBackOff", "ErrImagePull", "ImagePullBackOff", "InvalidImageName",
    "CreateContainerConfigError", "CreateContainerError", "RunContainerError",
})
RESTARTS = 2
"""A container that has failed this often is crash-looping, whatever its state now."""
LOG_LINES = 20


@dataclass(frozen=True)
class Stuck:
    namespace: str
    pod: str
    container: str
    reason: str
    message: str
    restarts: int

    def headline(self) -> str:
        restarts = f", {self.restarts} restarts" if self.restarts else ""
        message = f": {self.message}" if self.message else ""
        return (f"pod {self.namespace}/{self.pod} container {self.container}:"
                f" {self.reason}{restarts}{message}")


def stuck(pods: Iterable[dict[str, Any]]) -> list[Stuck]:
    """The containers of ``pods`` that are crash-looping or cannot start."""
    out = []
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        if meta.get("deletionTimestamp"):
            continue
        for cs in [*(status.get("initContainerStatuses") or []),
                   *(status.get("containerStatuses") or [])]:
            state, last = cs.get("state") or {}, cs.get("lastState") or {}
            waiting, ended = state.get("waiting") or {}, state.get("terminated") or {}
            restarts = int(cs.get("restartCount") or 0)
            if waiting.get("reason") in STUCK_WAITING:
                reason = waiting["reason"]
                message = (waiting.get("message")
                           or (last.get("terminated") or {}).get("message") or "")
            elif restarts >= RESTARTS and ended.get("exitCode", 0) != 0:
                reason = ended.get("reason") or "Error"
                message = ended.get("message") or f"exit code {ended.get('exitCode')}"
            else:
                continue
            out.append(Stuck(meta.get("namespace", ""), meta.get("name", ""),
                             cs.get("name", ""), reason, str(message).strip()[:500], restarts))
    return out


def describe(kube: Any, item: Stuck) -> str:
    """``item``'s headline and the last lines its container (or its previous run) logged."""
    lines = [item.headline()]
    for previous in ("false", "true"):
        log = _log(kube, item, previous=previous)
        if log.strip():
            lines += [f"   | {line}" for line in log.splitlines()[-LOG_LINES:]]
            break
    return "\n".join(lines)


def _log(kube: Any, item: Stuck, *, previous: str) -> str:
    path = f"/api/v1/namespaces/{item.namespace}/pods/{item.pod}/log"
    try:
        resp = kube.api.call_api(
            path, "GET", query_params=[("container", item.container),
                                       ("tailLines", str(LOG_LINES)), ("previous", previous)],
            header_params={"Accept": "text/plain"}, auth_settings=["BearerToken"],
            _preload_content=False, _request_timeout=10)
    except Exception:  # a log that cannot be read leaves the headline
        return ""
    raw = (resp[0] if isinstance(resp, tuple) else resp).data
    return raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
