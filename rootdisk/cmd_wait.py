"""``rootdisk wait dv NAME``: follow a DataVolume until it succeeds or fails.

A progress bar with the phase as its label; exit 0 on Succeeded, 1 on Failed (the
reason and message printed), 1 when the DataVolume does not exist, 3 on timeout. The
status is polled once a second: the command is for people and scripts, not a controller.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

POLL_SECONDS = 1.0
EXIT_FAILED, EXIT_TIMEOUT = 1, 3


def register(subparsers: Any) -> None:
    wait = subparsers.add_parser("wait", help="wait for a resource to be ready")
    kinds = wait.add_subparsers(dest="kind", metavar="KIND", required=True)
    dv = kinds.add_parser("dv", aliases=["datavolume"], help="wait for a DataVolume",
                          description="Show a DataVolume's progress until Succeeded; "
                          "exit non-zero with the reason when it fails.")
    dv.add_argument("name")
    dv.add_argument("-n", "--namespace", help="default: the kubeconfig context's, or default")
    dv.add_argument("--kubeconfig", help="default: KUBECONFIG, ~/.kube/config, rootdisk up's")
    dv.add_argument("--timeout", type=float, default=3600.0, help="seconds (default 3600)")
    dv.set_defaults(func=cmd_wait_dv)


def progress_value(text: str | None) -> float | None:
    """ "45.10%" → 45.1; "N/A" or garbage → None."""
    if not text or not text.endswith("%"):
        return None
    try:
        value = float(text[:-1])
    except ValueError:
        return None
    return min(max(value, 0.0), 100.0)


def failure_text(status: dict[str, Any]) -> str:
    conds = {c.get("type"): c for c in status.get("conditions") or []}
    for ctype in ("Running", "Ready", "Bound"):
        c = conds.get(ctype) or {}
        if c.get("reason") or c.get("message"):
            return f"{c.get('reason') or 'Failed'}: {c.get('message') or ''}".rstrip(": ")
    return "Failed"


def cmd_wait_dv(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from kubeclient import Client, KubeError, load_configuration
    from kubeclient.resources import DATAVOLUMES
    from rootdisk.kubeconfig import KubeconfigNotFound, discover, namespace

    try:
        found = discover(args.kubeconfig)
    except KubeconfigNotFound as err:
        print(f"rootdisk wait: {err}", file=sys.stderr)
        return EXIT_FAILED
    ns = namespace(args.namespace, found)
    client = Client(load_configuration(found.path))
    deadline = time.monotonic() + args.timeout
    bar = tqdm(total=100.0, unit="%", desc=f"{args.name}", file=sys.stderr,
               bar_format="{desc}: {percentage:5.1f}%|{bar}| {elapsed}")
    try:
        while True:
            try:
                dv = client.get_or_none(DATAVOLUMES, args.name, ns)
            except KubeError as err:
                bar.close()
                print(f"rootdisk wait: {err}", file=sys.stderr)
                return EXIT_FAILED
            if dv is None:
                bar.close()
                print(f"rootdisk wait: DataVolume {ns}/{args.name} not found", file=sys.stderr)
                return EXIT_FAILED
            status = dv.get("status") or {}
            phase = status.get("phase") or "Pending"
            value = progress_value(status.get("progress"))
            bar.set_description_str(f"{args.name} {phase}")
            if value is not None and value > bar.n:
                bar.update(value - bar.n)
            if phase == "Succeeded":
                bar.update(100.0 - bar.n)
                bar.close()
                print(f"DataVolume {ns}/{args.name} Succeeded (claim {status.get('claimName')})")
                return 0
            if phase == "Failed":
                bar.close()
                print(f"rootdisk wait: DataVolume {ns}/{args.name} Failed: "
                      f"{failure_text(status)}", file=sys.stderr)
                return EXIT_FAILED
            if time.monotonic() > deadline:
                bar.close()
                print(f"rootdisk wait: timed out after {args.timeout:g}s; DataVolume"
                      f" {ns}/{args.name} is {phase}", file=sys.stderr)
                return EXIT_TIMEOUT
            time.sleep(POLL_SECONDS)
    finally:
        client.close()
