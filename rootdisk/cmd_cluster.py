"""``rootdisk up`` / ``rootdisk down``: the embedded single-node cluster."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

POD_PIDS_LIMIT = 1024
"""The kubelet's podPidsLimit under ``rootdisk up`` (upstream's default is none): room
for the launcher's libvirtd and QEMU threads, a bound on a fork bomb."""


def register(subparsers: Any) -> None:
    up = subparsers.add_parser("up", help="start the embedded cluster and install rootdisk",
                               description="Start localcluster (API server, storage, node) "
                               "and apply manifests/; runs until interrupted.")
    up.add_argument("--data-dir", help="state directory (default: $XDG_STATE_HOME/rootdisk "
                    "or ~/.local/state/rootdisk)")
    up.add_argument("--port", type=int, default=0, help="API server port (default: any free)")
    up.add_argument("--manifests", help="manifests directory (default: the checkout's)")
    up.set_defaults(func=cmd_up)
    down = subparsers.add_parser("down", help="stop the embedded cluster",
                                 description="Stop the `rootdisk up` running on a data dir.")
    down.add_argument("--data-dir", help="state directory of the running cluster")
    down.add_argument("--timeout", type=float, default=60.0, help="seconds to wait")
    down.set_defaults(func=cmd_down)


def cmd_up(args: argparse.Namespace) -> int:
    from localcluster.cluster import (
        Cluster,
        ClusterError,
        Options,
        default_data_dir,
        is_running,
        secure_data_dir,
    )
    from rootdisk import codeprint
    from rootdisk.images import IMAGES

    data_dir = args.data_dir or default_data_dir()
    if not is_running(data_dir):  # a running cluster's fingerprint stays its own
        # before the start: `make demo` must never see this run without it
        secure_data_dir(data_dir)
        codeprint.record(data_dir, codeprint.fingerprint(
            codeprint.checkout(), Path(args.manifests) if args.manifests else None))
    cluster = Cluster(data_dir,
                      Options(images=IMAGES, port=args.port, manifests=args.manifests,
                              pod_pids_limit=POD_PIDS_LIMIT))
    try:
        cluster.start()
    except ClusterError as err:
        print(f"rootdisk up: {err}", file=sys.stderr)
        return 1
    try:
        print(f"localcluster is up; kubeconfig: {cluster.kubeconfig}", flush=True)
        print(f"  export KUBECONFIG={cluster.kubeconfig}", flush=True)
        cluster.run_until_signalled()
    finally:
        cluster.stop()
    print("localcluster stopped", flush=True)
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    from localcluster.cluster import ClusterError, default_data_dir, signal_stop

    data_dir = args.data_dir or default_data_dir()
    try:
        stopped = signal_stop(data_dir, timeout=args.timeout)
    except ClusterError as err:
        print(f"rootdisk down: {err}", file=sys.stderr)
        return 1
    if not stopped:
        print(f"rootdisk down: no cluster is running on {data_dir}", file=sys.stderr)
        return 1
    print("localcluster stopped", flush=True)
    return 0
