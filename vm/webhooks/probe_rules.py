"""Admission rules for a VMI's readiness and liveness probes (upstream's
``validateProbe`` and its pod-network and paused-start checks, kubevirt d923fdb815cd
``vmi-create-admitter.go``), with upstream's messages word for word.

Upstream does not refuse an ``exec`` or ``guestAgentPing`` probe on a guest without an
agent (every upstream domain has the agent channel; the probe just fails), and neither
does rootdisk: the launcher always adds the channel.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vm import podnetwork
from vm.webhooks.problem import Problem

HANDLERS = ("httpGet", "tcpSocket", "exec", "guestAgentPing")
TIMING = ("initialDelaySeconds", "periodSeconds", "timeoutSeconds", "successThreshold",
          "failureThreshold")
MINIMUM = {"initialDelaySeconds": 0, "periodSeconds": 1, "timeoutSeconds": 1,
           "successThreshold": 1, "failureThreshold": 1}


def _one(probe: Any, f: str, *, pod_network: bool, liveness: bool,
         out: list[Problem]) -> None:
    if probe is None:
        return
    if not isinstance(probe, Mapping):
        out.append(Problem(f, "must be an object"))
        return
    count = sum(probe.get(h) is not None for h in HANDLERS)
    if count > 1:
        out.append(Problem(f, f"{f} must have exactly one probe type set", verbatim=True))
    if count < 1:
        out.append(Problem(f, f"either {f}.tcpSocket, {f}.exec or {f}.httpGet must be set "
                           f"if a {f} is specified", verbatim=True))
    if not pod_network:
        for h in ("httpGet", "tcpSocket"):
            if probe.get(h) is not None:
                out.append(Problem(f"{f}.{h}", f"{f}.{h} is only allowed if the Pod "
                                   "Network is attached", verbatim=True))
    command = (probe.get("exec") or {}).get("command") if isinstance(
        probe.get("exec"), Mapping) else None
    if probe.get("exec") is not None and (
            not isinstance(command, list) or not command
            or not all(isinstance(c, str) for c in command)):
        # the kubelet's exec needs a program (upstream leaves it to the pod's validation)
        out.append(Problem(f"{f}.exec.command", "must be a non-empty list of strings"))
    for key in TIMING:
        value = probe.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            out.append(Problem(f"{f}.{key}", "must be an integer"))
        elif value < MINIMUM[key]:
            out.append(Problem(f"{f}.{key}", f"must be at least {MINIMUM[key]}"))
        elif liveness and key == "successThreshold" and value != 1:
            # the launcher pod's validation would refuse it (Kubernetes: must be 1)
            out.append(Problem(f"{f}.{key}", "must be 1 for a liveness probe"))


def probe_problems(spec: Mapping[str, Any], at: str) -> list[Problem]:
    out: list[Problem] = []
    pod_network = bool(podnetwork.pod_networks(spec))
    for key in ("readinessProbe", "livenessProbe"):
        _one(spec.get(key), f"{at}.{key}", pod_network=pod_network,
             liveness=key == "livenessProbe", out=out)
    # startStrategy: Paused with a liveness probe is refused by vmi_rules._start_strategy
    return out
