"""Stale launcher sockets are removed; live ones and those of VMIs on the node stay."""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path

from vm.handler.sockets import collect


def _bound(path: Path, *, listen: bool) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    if listen:
        s.listen(1)
    return s


def test_collect() -> None:
    with tempfile.TemporaryDirectory(prefix="hs-", dir="/tmp") as tmp:
        d = Path(tmp)
        dead = _bound(d / "dead.sock", listen=False)
        dead.close()                                   # the file stays, nobody listens
        mine = _bound(d / "mine.sock", listen=False)   # a VMI on this node: not touched
        mine.close()
        alive = _bound(d / "alive.sock", listen=True)  # unknown uid but listening
        (d / "notes.sock").write_text("not a socket")
        try:
            assert collect(d, ["mine"]) == 1
            assert sorted(p.name for p in d.iterdir()) == ["alive.sock", "mine.sock",
                                                          "notes.sock"]
        finally:
            alive.close()
