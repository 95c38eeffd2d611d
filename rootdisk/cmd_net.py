"""``rootdisk port-forward`` and ``rootdisk ssh`` (virtctl's): a VM's ports through the
cluster's ``portforward`` subresource, so they work the same on ``rootdisk up`` and on a
KubeVirt cluster.

- ``rootdisk port-forward TYPE/NAME[/NS] [PROTO/]LOCAL[:REMOTE]…`` listens on
  ``--address`` (default 127.0.0.1); ``--stdio`` carries one port on stdin/stdout.
- ``rootdisk ssh [USER@]TYPE/NAME[/NS]`` runs the local ``ssh`` with this command's
  ``port-forward --stdio`` as its ProxyCommand, the host named ``TYPE.NAME.NS``. Without
  ``-i`` it uses the VM's key at ``<rootdisk up data dir>/ssh/NS/NAME/id_ed25519`` when
  one is there (see ``rootdisk.vmkeys``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import Any


def _target_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", help="kubeconfig file (default: as kubectl, else the "
                   "running `rootdisk up`'s)")
    p.add_argument("-n", "--namespace", help="namespace when TYPE/NAME has none (default: "
                   "the context's, else default)")


class _Stdio(argparse.Action):
    """virtctl's ``--stdio`` and ``--stdio=true|false``: a bare ``--stdio`` followed by the
    target must not take the target for its value."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        if values in (None, "true", "false"):
            setattr(namespace, self.dest, values or "true")
            return
        setattr(namespace, self.dest, "true")
        namespace.taken_by_stdio = [values]


def register(subparsers: Any) -> None:
    pf = subparsers.add_parser(
        "port-forward", help="forward local ports to a VM's (through the API server)",
        description="Forward local ports to a VM's ports through the cluster's portforward "
        "subresource (virtctl port-forward). The VM must list the port in its interface's "
        "ports on rootdisk up (see docs/vm.md).")
    pf.add_argument("words", metavar="TYPE/NAME[/NAMESPACE] [PROTOCOL/]LOCAL[:REMOTE]",
                    nargs="*", help="vm/NAME or vmi/NAME, then ports: e.g. 8080, 8080:80, "
                    "udp/5353:53; with --stdio: the remote port")
    pf.add_argument("--address", default="127.0.0.1",
                    help="the local address to listen on (default 127.0.0.1)")
    pf.add_argument("--stdio", nargs="?", const="true", default="false", action=_Stdio,
                    help="carry one port on stdin and stdout (also --stdio=true)")
    _target_args(pf)
    pf.set_defaults(func=cmd_port_forward)
    ssh = subparsers.add_parser(
        "ssh", help="ssh into a VM (the local ssh, through port-forward --stdio)",
        description="Run the local ssh client through `rootdisk port-forward --stdio` "
        "(virtctl ssh --local-ssh). Host keys are kept under the name TYPE.NAME.NS.")
    ssh.add_argument("target", metavar="[USER@]TYPE/NAME[/NAMESPACE]")
    ssh.add_argument("-c", "--command", help="run this command instead of a shell")
    ssh.add_argument("-i", "--identity-file", help="private key (default: the VM's key "
                     "under rootdisk up's data dir, ssh/NS/NAME/id_ed25519, if present)")
    ssh.add_argument("-p", "--port", type=int, default=22, help="the VM's SSH port (22)")
    ssh.add_argument("-l", "--username", help="user (default: $USER, $USERNAME, $LOGNAME)")
    ssh.add_argument("-t", "--local-ssh-opts", action="append", default=[],
                     metavar="OPT", help="an option for the local ssh (repeatable)")
    _target_args(ssh)
    ssh.set_defaults(func=cmd_ssh)


def _fail(command: str, text: str) -> int:
    print(f"rootdisk {command}: {text}", file=sys.stderr)
    return 2


def cmd_port_forward(args: argparse.Namespace) -> int:
    import asyncio
    from urllib.parse import quote

    from rootdisk import portforward, vmtarget
    from rootdisk.cmd_vm import _connect
    from rootdisk.console import _ssl_and_headers
    words = [*getattr(args, "taken_by_stdio", []), *args.words]
    try:
        if len(words) < 2:
            raise vmtarget.TargetError("expected TYPE/NAME[/NAMESPACE] and at least one port")
        target = vmtarget.parse_target(words[0])
        args.ports = words[1:]
        if args.stdio == "true":
            if len(args.ports) != 1:
                raise vmtarget.TargetError("--stdio takes exactly one port")
            specs = [vmtarget.parse_port(args.ports[0])]
        else:
            specs = [vmtarget.parse_port(p) for p in args.ports]
    except vmtarget.TargetError as err:
        return _fail("port-forward", str(err))
    if target.namespace is not None:
        args.namespace = target.namespace
    kube, ns = _connect(args)
    try:
        ctx, headers, host = _ssl_and_headers(kube)
    finally:
        kube.api.close()

    def url_for(port: int, protocol: str) -> str:
        return host + quote(vmtarget.subresource_path(target, ns, port, protocol))

    fwd = portforward.Forwarder(url_for, ctx, headers)
    try:
        if args.stdio == "true":
            return asyncio.run(portforward.stdio(fwd, specs[0].remote))
        return asyncio.run(portforward.listen(fwd, args.address, specs))
    except KeyboardInterrupt:
        return 0


def _self_command() -> list[str]:
    """How to run this same rootdisk again (ssh's ProxyCommand)."""
    argv0 = sys.argv[0]
    if not argv0 or argv0.endswith("__main__.py") or argv0 == "-m":
        return [sys.executable, "-m", "rootdisk"]
    found = argv0 if os.sep in argv0 else shutil.which(argv0)
    return [os.path.abspath(found or argv0)]


def cmd_ssh(args: argparse.Namespace) -> int:
    from rootdisk import vmkeys, vmtarget
    user, rest = vmtarget.split_user(args.target)
    try:
        target = vmtarget.parse_target(rest)
        if not 1 <= args.port <= 65535:
            raise vmtarget.TargetError(f"-p {args.port}: must be from 1 to 65535")
    except vmtarget.TargetError as err:
        return _fail("ssh", str(err))
    if target.namespace is not None:
        ns = target.namespace
    else:
        from rootdisk import kubeconfig
        try:
            found = kubeconfig.discover(args.kubeconfig)
        except kubeconfig.KubeconfigNotFound as err:
            return _fail("ssh", str(err))
        ns = kubeconfig.namespace(args.namespace, found)
    identity, extra = args.identity_file, list(args.local_ssh_opts)
    from localcluster.cluster import default_data_dir
    try:
        if identity is None:
            identity = vmkeys.find_key(default_data_dir(), ns, target.name)
        known_hosts = vmkeys.find_known_hosts(default_data_dir(), ns, target.name)
    except vmkeys.UnusableKey as err:
        return _fail("ssh", str(err))
    if known_hosts is not None and not any("knownhostsfile" in o.lower() for o in extra):
        extra = ["-o", f"UserKnownHostsFile={known_hosts}", *extra]
    ssh = shutil.which("ssh")
    if ssh is None:
        return _fail("ssh", "no ssh client on PATH (Debian: openssh-client)")
    try:
        argv = vmtarget.ssh_argv(
            ssh=ssh, rootdisk=_self_command(), target=target, namespace=ns, port=args.port,
            user=user or args.username or vmtarget.default_user(os.environ),
            identity=identity, kubeconfig=args.kubeconfig, command=args.command,
            extra=extra)
    except vmtarget.TargetError as err:
        return _fail("ssh", str(err))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(ssh, argv)  # noqa: S606 - the user's own ssh, argv built above (no shell)
