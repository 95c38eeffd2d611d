"""Node-pressure eviction for memory: the decisions of upstream's eviction manager
(pkg/kubelet/eviction: helpers.go, eviction_manager.go), pure.

The node's writable layers (every container's root and /tmp) are tmpfs mounts in its
memory, and a pod without limits can grow its processes as it likes: without this, a
pod could take the node's memory until the host's OOM killer shoots some process, the
API server's as well as the pod's. As upstream's kubelet with its default
``--eviction-hard=memory.available<100Mi``:

- the signal is the node's available memory (here /proc/meminfo's ``MemAvailable``);
  below the hard threshold the node reports ``MemoryPressure=True``, and keeps
  reporting it for the transition period after it was last below (upstream's
  ``--eviction-pressure-transition-period``, 5 minutes);
- under the threshold one pod is evicted per pass, the first of :func:`rank`: those
  using more memory than they request first, then the lower Pod priority, then the
  larger use above the request. Its containers are killed at once (a hard threshold
  has no grace period), it ends ``Failed``, reason ``Evicted``, with
  :func:`eviction_message`;
- while the node has MemoryPressure, a new BestEffort pod is refused (:func:`admit`).

What a pod uses (measured by the node, see memstats.py): its containers' writable
layers and their processes' memory. The measuring is apart; everything here is table
tested.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sizes

SIGNAL = "memory.available"
DEFAULT_HARD = "100Mi"
"""Upstream's default hard threshold for ``memory.available``."""
DEFAULT_TRANSITION_PERIOD = 300.0
"""Seconds the node keeps MemoryPressure after it was last under the threshold."""
CHECK_EVERY = 2.0
"""Seconds between two looks at the node's available memory (upstream's monitoring
interval is 10 s; one read of /proc/meminfo is cheap, pods are measured only under
pressure)."""
REASON = "Evicted"
MEMORY_PRESSURE = "MemoryPressure"
CRITICAL_PRIORITY = 2_000_000_000
"""scheduling.SystemCriticalPriority: a pod at least this important is always admitted."""
MEMORY_PRESSURE_TAINT = "node.kubernetes.io/memory-pressure"


@dataclass(frozen=True)
class Threshold:
    text: str
    """As configured ("100Mi"), for the message."""
    bytes: int


def parse_threshold(raw: str | None, *, capacity: int) -> Threshold | None:
    """``memory.available`` hard threshold from the kubelet's configuration: a quantity
    ("100Mi"), a percentage of the node's memory ("5%"), either also written as upstream's
    statement (``memory.available<100Mi``). None (no eviction) for "", "0" or "0%".
    Raises ValueError for anything else."""
    text = (raw or "").strip()
    if text.startswith(SIGNAL):
        rest = text[len(SIGNAL):].lstrip()
        if not rest.startswith("<"):
            raise ValueError(f"eviction threshold {raw!r}: only {SIGNAL}< is supported")
        text = rest[1:].strip()
    if not text:
        return None
    if text.endswith("%"):
        try:
            percent = float(text[:-1])
        except ValueError:
            raise ValueError(f"eviction threshold {raw!r}: not a percentage") from None
        if not 0 <= percent <= 100:
            raise ValueError(f"eviction threshold {raw!r}: not a percentage")
        n = int(capacity * percent / 100)
        return Threshold(sizes.format_quantity(n, binary=True), n) if percent else None
    n = sizes.parse_bytes(text)
    if n < 0:
        raise ValueError(f"eviction threshold {raw!r} is negative")
    return Threshold(text, n) if n else None


def under(threshold: Threshold | None, available: int) -> bool:
    """Whether the threshold is met (upstream's operator ``LessThan``)."""
    return threshold is not None and available < threshold.bytes


class PressureState:
    """The MemoryPressure condition over time: True while the threshold is met and for
    ``transition_period`` seconds after it was last met (pure: the caller gives the
    clock)."""

    def __init__(self, transition_period: float = DEFAULT_TRANSITION_PERIOD) -> None:
        self.transition_period = transition_period
        self.last_met: float | None = None

    def observe(self, *, met: bool, now: float) -> bool:
        if met:
            self.last_met = now
        return self.active(now)

    def active(self, now: float) -> bool:
        return self.last_met is not None and now - self.last_met < self.transition_period


def condition_fields(pressure: bool) -> dict[str, str]:
    """status/reason/message of the node's MemoryPressure condition (upstream's
    nodestatus setters)."""
    if pressure:
        return {"status": "True", "reason": "KubeletHasInsufficientMemory",
                "message": "kubelet has insufficient memory available"}
    return {"status": "False", "reason": "KubeletHasSufficientMemory",
            "message": "kubelet has sufficient memory available"}


# -- requests, QoS, priority -----------------------------------------------------------

def _quantity(raw: Any) -> int:
    if raw in (None, ""):
        return 0
    try:
        return max(0, sizes.parse_bytes(raw))
    except ValueError:
        return 0


def container_memory_request(c: Mapping[str, Any]) -> int:
    """``requests.memory``, else ``limits.memory`` (the API server's defaulting)."""
    res = c.get("resources") or {}
    req = (res.get("requests") or {}).get("memory")
    if req in (None, ""):
        req = (res.get("limits") or {}).get("memory")
    return _quantity(req)


def pod_memory_request(pod: Mapping[str, Any]) -> int:
    """As upstream's GetResourceRequestQuantity: the containers' (and sidecars') sum, at
    least any other init container's, plus the pod's overhead."""
    spec = pod.get("spec") or {}
    inits = spec.get("initContainers") or []
    total = sum(container_memory_request(c) for c in [
        *(spec.get("containers") or []),
        *(c for c in inits if c.get("restartPolicy") == "Always")])
    for c in inits:
        if c.get("restartPolicy") != "Always":
            total = max(total, container_memory_request(c))
    return total + _quantity((spec.get("overhead") or {}).get("memory"))


def best_effort(pod: Mapping[str, Any]) -> bool:
    """QoS class BestEffort: no container asks for or is limited in CPU or memory."""
    spec = pod.get("spec") or {}
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        res = c.get("resources") or {}
        for kind in ("requests", "limits"):
            values = res.get(kind) or {}
            if any(values.get(r) not in (None, "", 0, "0") for r in ("cpu", "memory")):
                return False
    return True


def priority(pod: Mapping[str, Any]) -> int:
    value = (pod.get("spec") or {}).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _tolerates_memory_pressure(pod: Mapping[str, Any]) -> bool:
    for t in (pod.get("spec") or {}).get("tolerations") or []:
        if t.get("effect") not in (None, "", "NoSchedule"):
            continue
        key, op = t.get("key") or "", t.get("operator") or "Equal"
        if (op == "Exists" and key in ("", MEMORY_PRESSURE_TAINT)) or (
                op == "Equal" and key == MEMORY_PRESSURE_TAINT and not t.get("value")):
            return True
    return False


def admit(pod: Mapping[str, Any], *, pressure: bool) -> tuple[str, str] | None:
    """(reason, message) of upstream's admission refusal for a new pod, or None when it
    may run: under MemoryPressure a BestEffort pod is refused, unless it is critical or
    tolerates the memory-pressure taint. The kubelet prefixes "Pod was rejected: "."""
    if not pressure or priority(pod) >= CRITICAL_PRIORITY or not best_effort(pod):
        return None
    if _tolerates_memory_pressure(pod):
        return None
    return REASON, f"The node had condition: [{MEMORY_PRESSURE}]. "


# -- ranking and the message -----------------------------------------------------------

@dataclass(frozen=True)
class ContainerUse:
    name: str
    bytes: int
    request: int


@dataclass(frozen=True)
class PodUse:
    """What a pod on the node uses, as measured; ``key`` identifies it for the caller."""
    key: str
    priority: int
    request: int
    containers: tuple[ContainerUse, ...]

    @property
    def bytes(self) -> int:
        return sum(c.bytes for c in self.containers)


def pod_use(key: str, pod: Mapping[str, Any], used: Mapping[str, int]) -> PodUse:
    """A pod's :class:`PodUse` from its spec and each running container's bytes."""
    spec = pod.get("spec") or {}
    containers = tuple(
        ContainerUse(str(c.get("name")), used[str(c.get("name"))],
                     container_memory_request(c))
        for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
        if str(c.get("name")) in used)
    return PodUse(key, priority(pod), pod_memory_request(pod), containers)


def rank(pods: Sequence[PodUse]) -> list[PodUse]:
    """The pods in eviction order (upstream's rankMemoryPressure): those whose use
    exceeds their request first, then by priority (lowest first), then by the use above
    the request (largest first)."""
    return sorted(pods, key=lambda p: (not p.bytes > p.request, p.priority,
                                       -(p.bytes - p.request)))


def _binary(n: int) -> str:
    return sizes.format_quantity(n, binary=True)


def eviction_message(threshold: Threshold, available: int, pod: PodUse) -> str:
    """Upstream's evictionMessage for memory: the threshold and what was available, then
    each container using more than its request."""
    message = (f"The node was low on resource: memory. Threshold quantity: {threshold.text},"
               f" available: {_binary(available)}. ")
    for c in pod.containers:
        if c.bytes > c.request:
            message += (f"Container {c.name} was using {_binary(c.bytes)}, request is"
                        f" {_binary(c.request)}, has larger consumption of memory. ")
    return message
