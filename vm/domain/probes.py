"""A VMI's readiness and liveness probes as the launcher pod carries them (pure).

Upstream (kubevirt d923fdb815cd, ``pkg/virt-controller/services/rendercontainer.go``)
puts the VMI's probes on the launcher pod's ``compute`` container, where the kubelet
runs them: ``tcpSocket`` and ``httpGet`` against the pod IP (where the masquerade
binding takes the guest's ports), ``exec`` and ``guestAgentPing`` wrapped in
``virt-probe``, which asks the launcher to run the command through the guest agent
(``guest-exec``) or to ``guest-ping`` it. Each gets ``initialDelaySeconds`` plus
:data:`LIBVIRT_STARTUP_DELAY`; a wrapped one gets one more second of timeout.

Here the wrapper is ``python -m vm.launcher.probe`` with the launcher's control socket
named on its command line, and a guest port below the node's unprivileged start is
probed where the launcher took it (``podnet.node_port``). ``tcpSocket`` is wrapped too:
QEMU's user network accepts on the pod side whether or not the guest listens, so a bare
connect would always pass; the launcher checks that the guest itself accepted
(:mod:`vm.launcher.tcp_probe`). The launcher forwards a
probed TCP port even when the interface does not list it (upstream forwards every
port), so a probe reaches the guest either way.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from vm.domain import podnet

PROBES = ("readinessProbe", "livenessProbe")
LIBVIRT_STARTUP_DELAY = 10
"""Seconds upstream adds to each probe's initialDelaySeconds."""
PROBE_MODULE = ("python", "-m", "vm.launcher.probe")


def _int_port(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def guest_tcp_ports(spec: Mapping[str, Any]) -> tuple[int, ...]:
    """The guest TCP ports the VMI's tcpSocket/httpGet probes reach (numbered ones,
    1-65535), in order, each once."""
    out: list[int] = []
    for key in PROBES:
        probe = spec.get(key)
        if not isinstance(probe, Mapping):
            continue
        for handler in ("tcpSocket", "httpGet"):
            h = probe.get(handler)
            if isinstance(h, Mapping):
                port = _int_port(h.get("port"))
                if port is not None and 1 <= port <= 65535 and port not in out:
                    out.append(port)
    return tuple(out)


def container_probe(probe: Mapping[str, Any], *, socket: str,
                    unprivileged_start: int) -> dict[str, Any]:
    """The compute container's probe for one VMI probe (a copy; the VMI's is untouched)."""
    out: dict[str, Any] = {k: copy.deepcopy(v) for k, v in probe.items()
                           if k != "guestAgentPing"}
    out["initialDelaySeconds"] = int(probe.get("initialDelaySeconds") or 0) \
        + LIBVIRT_STARTUP_DELAY
    timeout = int(probe.get("timeoutSeconds") or 1)
    for handler in ("tcpSocket", "httpGet"):
        h = out.get(handler)
        if isinstance(h, dict):
            port = _int_port(h.get("port"))
            if port is not None:
                h["port"] = podnet.node_port(port, unprivileged_start)
    wrapped: list[str] | None = None
    tcp = probe.get("tcpSocket")
    tcp_port = _int_port(tcp.get("port")) if isinstance(tcp, Mapping) else None
    if tcp_port is not None:
        out.pop("tcpSocket")
        wrapped = [*PROBE_MODULE, "--socket", socket, "--timeoutSeconds", str(timeout),
                   "--tcpSocket", str(tcp_port)]
    elif probe.get("guestAgentPing") is not None:
        wrapped = [*PROBE_MODULE, "--socket", socket, "--timeoutSeconds", str(timeout),
                   "--guestAgentPing"]
    elif isinstance(probe.get("exec"), Mapping):
        command = [str(c) for c in (probe["exec"].get("command") or [])]
        wrapped = [*PROBE_MODULE, "--socket", socket, "--timeoutSeconds", str(timeout),
                   "--command", *command[:1], "--", *command[1:]]
    if wrapped is not None:
        out["exec"] = {"command": wrapped}
        out["timeoutSeconds"] = timeout + 1
    return out
