"""The node handler's I/O: the VMIs on its node, their launchers' sockets, status, and
its console certificate as virt-api issued it."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubeclient import Client, KubeError
from kubeclient.resources import VMIS
from pki import serving
from vm.api.kube import HANDLER_SECRET, read_handlers
from vm.controller.status import merge_conditions
from vm.controller.views import Condition, conditions_of
from vm.handler import sockets
from vm.handler.guestagent import AGENT_CONNECTED, AGENT_UNSUPPORTED, AgentStatus, from_guestinfo
from vm.handler.phases import from_state
from vm.launcher import client as launcher
from vocab import kubevirt as names

logger = logging.getLogger(__name__)
SOCKETS = "/var/run/kubevirt/sockets"
STATUS_TIMEOUT = 3.0


def console_identity(kube: Client, namespace: str) -> serving.Issued:
    """The console certificate virt-api issued for the node handlers, with the bundle
    virt-api's certificate is checked against; RuntimeError while virt-api has issued
    none."""
    found = read_handlers(kube, namespace)
    if found is None:
        raise RuntimeError(f"Secret {namespace}/{HANDLER_SECRET} holds no certificate yet"
                           " (is virt-api up?)")
    return found


def vmis_on(kube: Client, node: str) -> list[dict[str, Any]]:
    return kube.list(VMIS, None, labelSelector=f"{names.LABEL_NODE_NAME}={node}")


def vmis_unplaced(kube: Client) -> list[dict[str, Any]]:
    """The VMIs on no node yet (any of them may start here)."""
    return kube.list(VMIS, None, labelSelector=f"!{names.LABEL_NODE_NAME}")


def socket_of(vmi: dict[str, Any], socket_dir: str = SOCKETS) -> Path:
    """``<socket_dir>/<uid>/<uid>.sock``: the launcher's socket in its own directory."""
    return sockets.socket_of(socket_dir, str(vmi["metadata"]["uid"]))


def sync(kube: Client, vmi: dict[str, Any], *, socket_dir: str, shut: set[str]) -> None:
    """One VMI: shutdown if deleted, else its phase from the launcher's state."""
    meta = vmi["metadata"]
    path = socket_of(vmi, socket_dir)
    if meta.get("deletionTimestamp"):
        if meta["uid"] not in shut:
            grace = (vmi.get("spec") or {}).get("terminationGracePeriodSeconds")
            try:
                launcher.shutdown(path, grace_period_seconds=30 if grace is None else int(grace),
                                  timeout=STATUS_TIMEOUT)
                shut.add(meta["uid"])
            except launcher.ControlError as err:
                logger.info("shutdown of %s/%s: %s", meta["namespace"], meta["name"], err)
        return
    phase = str((vmi.get("status") or {}).get("phase") or "")
    if phase not in ("Scheduled", "Running"):
        return
    try:
        answer = launcher.status(path, timeout=STATUS_TIMEOUT)
    except launcher.ControlError as err:
        logger.debug("status of %s/%s: %s", meta["namespace"], meta["name"], err)
        return
    update = from_state(phase=phase, answer=answer)
    if update is None:
        return
    old = vmi.get("status") or {}
    kept = [c for c in conditions_of(vmi) if c.type != "Paused"]
    if update.paused is not None:
        kept.append(update.paused)
    agent = None
    if update.phase == "Running":
        kept, agent = _with_agent(vmi, path, kept)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = dict(old)
    status["phase"] = update.phase
    if update.reason:
        status["reason"] = update.reason
    status["conditions"] = merge_conditions(new=kept, old=old.get("conditions") or [],
                                            now=now)
    if agent is not None:
        _agent_fields(agent, status)
    if update.phase != old.get("phase"):
        stamps = list(old.get("phaseTransitionTimestamps") or [])
        stamps.append({"phase": update.phase, "phaseTransitionTimestamp": now})
        status["phaseTransitionTimestamps"] = stamps
    if status == old:
        return
    body = dict(vmi)
    body["status"] = status
    try:
        kube.replace_status(VMIS, body)
    except KubeError as err:
        if err.status not in (404, 409):
            raise



def _with_agent(vmi: dict[str, Any], path: Path,
                kept: list[Condition]) -> tuple[list[Condition], AgentStatus | None]:
    """The conditions with the guest agent's ones as the launcher reports them now
    (AgentConnected goes on a disconnect; AgentVersionNotSupported is decided only while
    connected, as upstream). A launcher that cannot tell (unreachable, one without
    guestinfo) leaves them as they are: (kept, None)."""
    uid = str(vmi["metadata"]["uid"])
    try:
        info = launcher.guestinfo(path, timeout=STATUS_TIMEOUT)
    except launcher.ControlError as err:
        logger.debug("guestinfo of %s: %s", uid, err)
        return kept, None
    if "connected" not in info:  # {"ok": false, ...}
        return kept, None
    agent = from_guestinfo(vmi=vmi, info=info)
    drop = (AGENT_CONNECTED, AGENT_UNSUPPORTED) if agent.conditions else (AGENT_CONNECTED,)
    return [c for c in kept if c.type not in drop] + list(agent.conditions), agent


def _agent_fields(agent: AgentStatus, status: dict[str, Any]) -> None:
    if agent.guest_os_info is not None:
        status["guestOSInfo"] = agent.guest_os_info
    if agent.interfaces or status.get("interfaces"):
        status["interfaces"] = agent.interfaces
