"""``python -m vm.launcher.probe``: upstream's ``virt-probe``, the command the kubelet
runs in the compute container for a VMI's ``exec`` and ``guestAgentPing`` probes (and,
here, ``tcpSocket``: see :mod:`vm.launcher.tcp_probe`).

It asks the launcher, through its control socket, to run the command in the guest
(guest-exec), to ping the agent or to check a guest TCP port, and exits 0 when that
succeeded, 1 with the reason on stderr when not. Bounded by ``--timeoutSeconds`` plus a
second. It imports only the socket client, so it starts fast (the kubelet gives it the
probe's timeout + 1 s).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from vm.launcher import client


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="virt-probe", description=__doc__)
    parser.add_argument("--socket", required=True, help="the launcher's control socket")
    parser.add_argument("--timeoutSeconds", type=int, default=1, dest="timeout")
    parser.add_argument("--guestAgentPing", action="store_true", dest="ping")
    parser.add_argument("--tcpSocket", type=int, dest="tcp_port",
                        help="the guest TCP port that must accept")
    parser.add_argument("--command", help="the program to run in the guest")
    parser.add_argument("args", nargs="*", help="its arguments (after --)")
    ns = parser.parse_args(argv)
    if [bool(ns.ping), bool(ns.command), ns.tcp_port is not None].count(True) != 1:
        parser.error("exactly one of --command, --guestAgentPing and --tcpSocket")
    if ns.timeout < 1:
        parser.error("--timeoutSeconds must be at least 1")
    return ns


def main(argv: Sequence[str] | None = None) -> int:
    ns = parse(sys.argv[1:] if argv is None else argv)
    try:
        answer = client.probe(ns.socket, timeout_seconds=ns.timeout,
                              command=[ns.command, *ns.args] if ns.command else None,
                              guest_agent_ping=ns.ping, tcp_port=ns.tcp_port)
    except client.ControlError as err:
        print(f"virt-probe: {err}", file=sys.stderr)
        return 1
    if answer.get("ok") is True:
        return 0
    print(f"virt-probe: {answer.get('error') or 'probe failed'}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
