"""What ``rootdisk port-forward`` and ``rootdisk ssh`` are told, parsed and checked (pure):
virtctl's ``TYPE/NAME[/NAMESPACE]`` targets, ``[PROTOCOL/]LOCAL[:REMOTE]`` port specs,
and the local ``ssh`` command line ``rootdisk ssh`` runs.

Names must be DNS-1123 (a VM's name and namespace are), which also keeps them safe in the
``ProxyCommand`` that ssh hands to a shell.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vocab import kubevirt

KINDS = {
    "vm": "vm", "vms": "vm", "virtualmachine": "vm", "virtualmachines": "vm",
    "vmi": "vmi", "vmis": "vmi", "virtualmachineinstance": "vmi",
    "virtualmachineinstances": "vmi",
}
RESOURCE = {"vm": kubevirt.VM_PLURAL, "vmi": kubevirt.VMI_PLURAL}
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_USER = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._-]{0,63}")


class TargetError(ValueError):
    """A target, port or user that cannot be used; the message names it."""


@dataclass(frozen=True)
class Target:
    kind: str  # "vm" | "vmi"
    name: str
    namespace: str | None

    @property
    def resource(self) -> str:
        return RESOURCE[self.kind]


@dataclass(frozen=True)
class PortSpec:
    protocol: str  # "tcp" | "udp"
    local: int  # 0: any free port
    remote: int


def parse_target(text: str) -> Target:
    """``TYPE/NAME[/NAMESPACE]``, TYPE one of vm, vmi (or their long names)."""
    parts = text.split("/")
    if len(parts) not in (2, 3) or parts[0].lower() not in KINDS:
        raise TargetError(f"target {text[:80]!r}: expected TYPE/NAME[/NAMESPACE] with TYPE "
                          "vm or vmi (e.g. vm/demo or vm/demo/default)")
    name = parts[1]
    if not _SUBDOMAIN.fullmatch(name):
        raise TargetError(f"target {text[:80]!r}: {name[:80]!r} is not a valid name")
    namespace = parts[2] if len(parts) == 3 else None
    if namespace is not None and not _LABEL.fullmatch(namespace):
        raise TargetError(f"target {text[:80]!r}: {namespace[:80]!r} is not a valid namespace")
    return Target(kind=KINDS[parts[0].lower()], name=name, namespace=namespace)


def _port(text: str, what: str, spec: str, *, low: int) -> int:
    if not (text.isascii() and text.isdigit()) or not low <= int(text) <= 65535:
        raise TargetError(f"port {spec[:40]!r}: the {what} port must be a number from {low} "
                          "to 65535")
    return int(text)


def parse_port(spec: str) -> PortSpec:
    """``[tcp/|udp/]LOCAL[:REMOTE]``; REMOTE defaults to LOCAL, LOCAL 0 picks a free one."""
    protocol, _, rest = spec.rpartition("/")
    protocol = protocol.lower() or "tcp"
    if protocol not in ("tcp", "udp"):
        raise TargetError(f"port {spec[:40]!r}: the protocol must be tcp or udp")
    local_text, sep, remote_text = rest.partition(":")
    local = _port(local_text, "local", spec, low=0)
    remote = _port(remote_text if sep else local_text, "remote", spec, low=1)
    return PortSpec(protocol=protocol, local=local, remote=remote)


def subresource_path(target: Target, namespace: str, port: int, protocol: str) -> str:
    return (f"{kubevirt.SUBRESOURCE_PATH}/namespaces/{namespace}/{target.resource}/"
            f"{target.name}/portforward/{port}/{protocol}")


# --- ssh ---------------------------------------------------------------------------------


def split_user(text: str) -> tuple[str | None, str]:
    """``[USER@]TARGET`` -> (USER or None, TARGET)."""
    user, at, rest = text.rpartition("@")
    return (user if at else None), rest


def default_user(env: Mapping[str, str]) -> str | None:
    """virtctl's: ``$USER``, then ``$USERNAME``, then ``$LOGNAME``."""
    for key in ("USER", "USERNAME", "LOGNAME"):
        if env.get(key):
            return env[key]
    return None


def _proxy_word(word: str) -> str:
    # ssh runs ProxyCommand through a shell after expanding its own %-tokens
    return shlex.quote(word).replace("%", "%%")


def ssh_argv(*, ssh: str, rootdisk: Sequence[str], target: Target, namespace: str,
             port: int, user: str | None, identity: str | None,
             kubeconfig: str | None, command: str | None,
             extra: Sequence[str] = ()) -> list[str]:
    """The local ``ssh`` command virtctl's ``ssh --local-ssh`` runs: the connection goes
    through ``<rootdisk> port-forward --stdio=true KIND/NAME/NS PORT`` as ProxyCommand, and
    the host is called ``KIND.NAME.NS`` (the name known_hosts keeps its key under)."""
    if user is not None and not _USER.fullmatch(user):
        raise TargetError(f"user {user[:70]!r}: not a valid user name")
    proxy = [*rootdisk, "port-forward", "--stdio=true"]
    if kubeconfig:
        proxy += ["--kubeconfig", kubeconfig]
    proxy += [f"{target.kind}/{target.name}/{namespace}", str(port)]
    argv = [ssh, "-o", "ProxyCommand=" + " ".join(_proxy_word(w) for w in proxy), *extra]
    if identity:
        argv += ["-i", identity]
    host = f"{target.kind}.{target.name}.{namespace}"
    argv.append(f"{user}@{host}" if user else host)
    if command:
        argv += ["--", command]
    return argv
