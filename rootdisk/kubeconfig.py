"""Which kubeconfig and namespace a cluster command uses, found as kubectl finds them.

Order: ``--kubeconfig``; ``$KUBECONFIG`` (the first existing file of its list); the file
``~/.kube/config``; else the kubeconfig of the running ``rootdisk up`` (its data dir, by
default ``$XDG_STATE_HOME/rootdisk``). The namespace: ``-n``, else the current context's,
else ``default``. One module, for every command that talks to a cluster (``wait dv``, and
the VM commands).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import yaml


class KubeconfigNotFound(Exception):
    """No kubeconfig anywhere kubectl would look, and no running ``rootdisk up``."""


@dataclass(frozen=True)
class Found:
    path: str
    source: str   # "flag", "KUBECONFIG", "~/.kube/config", "rootdisk up"


def find(
    *, flag: str | None, env: Mapping[str, str], home: str, exists: Callable[[str], bool],
    running_data_dir: str | None,
) -> Found:
    """The kubeconfig to use; ``running_data_dir`` is a running ``rootdisk up``'s, if any."""
    if flag:
        if not exists(flag):
            raise KubeconfigNotFound(f"--kubeconfig {flag}: no such file")
        return Found(flag, "flag")
    listed = [p for p in (env.get("KUBECONFIG") or "").split(os.pathsep) if p]
    for path in listed:
        if exists(path):
            return Found(path, "KUBECONFIG")
    if listed:
        raise KubeconfigNotFound(f"KUBECONFIG={env['KUBECONFIG']}: none of its files exists")
    default = os.path.join(home, ".kube", "config")
    if exists(default):
        return Found(default, "~/.kube/config")
    if running_data_dir is not None:
        path = os.path.join(running_data_dir, "kubeconfig")
        if exists(path):
            return Found(path, "rootdisk up")
    raise KubeconfigNotFound(
        "no kubeconfig: pass --kubeconfig, set KUBECONFIG, create ~/.kube/config, or start"
        " the embedded cluster with `rootdisk up`")


def current_namespace(kubeconfig_text: str) -> str:
    """The namespace of the kubeconfig's current context, else ``default``."""
    try:
        doc = yaml.safe_load(kubeconfig_text) or {}
    except yaml.YAMLError:
        return "default"
    if not isinstance(doc, dict):
        return "default"
    current = doc.get("current-context")
    for ctx in doc.get("contexts") or []:
        if isinstance(ctx, dict) and ctx.get("name") == current:
            ns = (ctx.get("context") or {}).get("namespace")
            return str(ns) if ns else "default"
    return "default"


def discover(flag: str | None) -> Found:
    """:func:`find` with this process's environment and a running ``rootdisk up``.

    The embedded cluster's module (slow to import) is looked at only when nothing else
    names a kubeconfig."""
    try:
        return find(flag=flag, env=os.environ, home=os.path.expanduser("~"),
                    exists=os.path.isfile, running_data_dir=None)
    except KubeconfigNotFound:
        if flag or os.environ.get("KUBECONFIG"):
            raise
    from localcluster.cluster import default_data_dir, is_running

    data_dir = default_data_dir()
    found = find(flag=flag, env=os.environ, home=os.path.expanduser("~"),
                 exists=os.path.isfile,
                 running_data_dir=data_dir if is_running(data_dir) else None)
    warn_if_stale(data_dir)
    return found


def warn_if_stale(data_dir: str) -> None:
    """A note on stderr when the running ``rootdisk up`` of ``data_dir`` recorded another
    code fingerprint than this checkout's: its operators run older (or newer) code than
    the pods it starts now (see :mod:`rootdisk.codeprint`). A cluster without a record is
    left alone (it was not started by ``rootdisk up``, or by an older one)."""
    from rootdisk import codeprint

    if codeprint.runs_other_code(data_dir):
        print(f"rootdisk: the embedded cluster on {data_dir} was started from other code "
              "than this checkout's; `make demo` (or `rootdisk down`, then `rootdisk up`) "
              "restarts it", file=sys.stderr)


def namespace(flag: str | None, found: Found) -> str:
    if flag:
        return flag
    with open(found.path, encoding="utf-8") as fh:
        return current_namespace(fh.read())
