"""A launcher's control server without a guest, for the socket isolation test, run in a
launcher pod's sandbox: ``python -m tests.vm.control_stub SOCKET_DIR UID [VICTIM_UID
VICTIM_HOST_SOCKET]``.

With one uid it serves ``SOCKET_DIR/UID.sock`` (``status`` answers ``reason: UID``),
prints ``ready`` and runs until killed. With a victim it is the attacker: it serves its
own socket too, then does from inside its pod what a user who execs into it could (list
the socket directory, look for the victim's socket, connect to it, remove it), replaces
its own socket with a symlink to the victim's socket as the handler sees it, prints what
happened as one JSON line and exits without cleaning up.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys

from vm.launcher import protocol
from vm.launcher.console import ConsoleHub, RotatingLog
from vm.launcher.control import ControlServer


class Controls:
    def __init__(self, uid: str) -> None:
        self.uid = uid

    def status(self) -> protocol.Status:
        return protocol.Status(state="running", reason=self.uid, driver="stub",
                               accelerator="tcg", started_at=None)

    async def shutdown(self, grace_period_seconds: int | None) -> None:
        return None

    async def kill(self) -> None:
        return None

    async def pause(self) -> None:
        return None

    async def unpause(self) -> None:
        return None


def _try(action: str, path: str) -> str:
    try:
        if action == "connect":  # from its directory: the full path may be too long
            os.chdir(os.path.dirname(path))
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(2)
                s.connect(os.path.basename(path))
        else:
            os.unlink(path)
        return "done"
    except OSError as err:
        return type(err).__name__
    finally:
        os.chdir("/")


def attack(socket_dir: str, own: str, victim: str, victim_host_socket: str) -> dict[str, object]:
    candidates = [
        f"{socket_dir}/{victim}.sock",                      # the old shared layout
        f"{socket_dir}/{victim}/{victim}.sock",             # a sibling directory
        f"{socket_dir}/../sockets/{victim}/{victim}.sock",
        f"{socket_dir}/../{victim}/{victim}.sock",
        victim_host_socket,                                 # the node's path itself
    ]
    found = [os.path.join(d, n) for d, dirs, files in os.walk("/var/run")
             for n in dirs + files if victim in n]
    report: dict[str, object] = {
        "listing": sorted(os.listdir(socket_dir)),
        "found": found,
        "connect": {p: _try("connect", p) for p in candidates},
        "unlink": {p: _try("unlink", p) for p in candidates},
    }
    mine = f"{socket_dir}/{own}.sock"
    os.unlink(mine)
    os.symlink(victim_host_socket, mine)  # for the handler: "my" socket is the victim's
    return report


async def main(argv: list[str]) -> None:
    socket_dir, uid = argv[0], argv[1]
    hub = ConsoleHub(RotatingLog(f"/tmp/console-{uid}.log"))
    server = ControlServer(path=f"{socket_dir}/{uid}.sock", controls=Controls(uid),
                           console=hub)
    await server.start()
    if len(argv) > 2:
        print(json.dumps(attack(socket_dir, uid, argv[2], argv[3])), flush=True)
        os._exit(0)  # no cleanup: the symlink stays for the handler to meet
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
