"""``rootdisk start|stop|restart VM`` and ``rootdisk console VM [--log]`` (virtctl's).

They use the cluster's ``subresources.kubevirt.io/v1`` API, so they work the same on a
real KubeVirt-compatible cluster and on ``rootdisk up``. The cluster and namespace are
found by ``rootdisk.kubeconfig`` (as kubectl, else the running ``rootdisk up``'s).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from vocab import kubevirt

SUB = kubevirt.SUBRESOURCE_PATH


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("vm", metavar="VM", help="the VirtualMachine's name")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: as kubectl, else the "
                   "running `rootdisk up`'s)")
    p.add_argument("-n", "--namespace", help="namespace (default: the context's, else default)")
    p.add_argument("--json", action="store_true", help="machine-readable result")


def register(subparsers: Any) -> None:
    start = subparsers.add_parser("start", help="start a VirtualMachine")
    _common(start)
    start.add_argument("--paused", action="store_true", help="start the guest paused")
    start.add_argument("--dry-run", action="store_true", help="check only, change nothing")
    start.set_defaults(func=cmd_lifecycle, action="start")
    stop = subparsers.add_parser("stop", help="stop a VirtualMachine")
    _common(stop)
    stop.add_argument("--grace-period", type=int, help="seconds for the guest to shut down")
    stop.add_argument("--force", action="store_true", help="with --grace-period=0: at once")
    stop.add_argument("--dry-run", action="store_true", help="check only, change nothing")
    stop.set_defaults(func=cmd_lifecycle, action="stop")
    restart = subparsers.add_parser("restart", help="restart a VirtualMachine")
    _common(restart)
    restart.add_argument("--grace-period", type=int, help="0 with --force: kill at once")
    restart.add_argument("--force", action="store_true", help="with --grace-period=0")
    restart.add_argument("--dry-run", action="store_true", help="check only, change nothing")
    restart.set_defaults(func=cmd_lifecycle, action="restart")
    for action in ("pause", "unpause"):
        p = subparsers.add_parser(action, help=f"{action} a VM's guest (its VMI's CPUs)")
        p.add_argument("target", metavar="vm/NAME|vmi/NAME",
                       help="vm/NAME or vmi/NAME (or virtctl's two words: vm NAME)")
        p.add_argument("name", nargs="?", help=argparse.SUPPRESS)
        p.add_argument("--kubeconfig", help="kubeconfig file (default: as kubectl, else the "
                       "running `rootdisk up`'s)")
        p.add_argument("-n", "--namespace",
                       help="namespace (default: the context's, else default)")
        p.add_argument("--dry-run", action="store_true", help="check only, change nothing")
        p.set_defaults(func=cmd_pause, action=action)
    console = subparsers.add_parser("console", help="attach to a VM's serial console "
                                    "(Ctrl+] detaches)")
    _common(console)
    console.add_argument("--log", action="store_true",
                         help="print the console log (guest-console-log) and exit")
    console.add_argument("--raw", action="store_true",
                         help="with --log on a terminal: print the guest's control"
                         " characters as they are (default: shown as ^[ and \\x9b)")
    console.add_argument("--timeout", type=float, default=300.0,
                         help="seconds to wait for the VM to be running (default 300)")
    console.set_defaults(func=cmd_console)


def _connect(args: argparse.Namespace) -> tuple[Any, str]:
    from kubeclient import Client, load_configuration
    from rootdisk import kubeconfig
    try:
        found = kubeconfig.discover(args.kubeconfig)
    except kubeconfig.KubeconfigNotFound as err:
        raise SystemExit(f"rootdisk {args.command}: {err}") from None
    return Client(load_configuration(found.path)), kubeconfig.namespace(args.namespace, found)


def cmd_lifecycle(args: argparse.Namespace) -> int:
    import json

    from kubeclient import KubeError
    kube, ns = _connect(args)
    body: dict[str, Any] = {"kind": f"{args.action.capitalize()}Options",
                            "apiVersion": kubevirt.SUBRESOURCE_API_VERSION}
    if args.dry_run:
        body["dryRun"] = ["All"]
    if args.action == "start" and args.paused:
        body["paused"] = True
    grace = getattr(args, "grace_period", None)
    if grace is not None:
        body["gracePeriod" if args.action == "stop" else "gracePeriodSeconds"] = grace
    if getattr(args, "force", False):
        body["force"] = True
    try:
        kube.request("PUT", f"{SUB}/namespaces/{ns}/virtualmachines/{args.vm}/{args.action}",
                     body=body)
    except KubeError as err:
        if args.json:
            print(json.dumps({"ok": False, "code": err.status, "message": err.message}))
        else:
            print(f"rootdisk {args.action}: {err.message}", file=sys.stderr)
        return 1
    finally:
        kube.api.close()
    done = {"start": "was scheduled to start", "stop": "was scheduled to stop",
            "restart": "was scheduled to restart"}[args.action]
    if args.json:
        print(json.dumps({"ok": True, "vm": args.vm, "namespace": ns, "action": args.action,
                          "dryRun": args.dry_run}))
    else:
        print(f"VM {args.vm} {done}" + (" (dry run)" if args.dry_run else ""))
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    """virtctl's pause/unpause: for a VM, the VMI of its name (upstream's messages)."""
    from kubeclient import KubeError
    from kubeclient.resources import VMS
    from rootdisk.vmtarget import TargetError, parse_target
    from vm.controller.runstrategy import InvalidRunStrategy, run_strategy
    text = f"{args.target}/{args.name}" if args.name else args.target
    try:
        target = parse_target(text)
    except TargetError as err:
        print(f"rootdisk {args.action}: {err}", file=sys.stderr)
        return 2
    kube, ns = _connect(args)
    ns = target.namespace or ns
    verb = "pausing" if args.action == "pause" else "unpausing"
    body: dict[str, Any] = {"kind": f"{args.action.capitalize()}Options",
                            "apiVersion": kubevirt.SUBRESOURCE_API_VERSION}
    if args.dry_run:
        print("Dry Run execution")
        body["dryRun"] = ["All"]
    try:
        vm = None
        if target.kind == "vm":
            try:
                vm = kube.request("GET", VMS.path(ns, target.name))
            except KubeError as err:
                print(f"Error getting VirtualMachine {target.name}: {err.message}",
                      file=sys.stderr)
                return 1
        try:
            kube.request("PUT", f"{SUB}/namespaces/{ns}/virtualmachineinstances/"
                                f"{target.name}/{args.action}", body=body)
        except KubeError as err:
            message = f"Error {verb} VirtualMachineInstance {target.name}: {err.message}"
            if vm is not None and err.status == 404:
                try:
                    halted = run_strategy(vm.get("spec") or {}) == "Halted"
                except InvalidRunStrategy:
                    halted = False
                message = (f"Error {verb} VirtualMachineInstance {target.name}. "
                           f"VirtualMachine {target.name} is not set to run" if halted else
                           f"Error {verb} VirtualMachineInstance {target.name}, it was not "
                           "found")
            print(message, file=sys.stderr)
            return 1
    finally:
        kube.api.close()
    print(f"VMI {target.name} was scheduled to {args.action}")
    return 0


def cmd_console(args: argparse.Namespace) -> int:
    from rootdisk import console
    kube, ns = _connect(args)
    try:
        if args.log:
            return console.print_log(kube, ns, args.vm, raw=args.raw)
        return console.attach(kube, ns, args.vm, timeout=args.timeout)
    finally:
        kube.api.close()
