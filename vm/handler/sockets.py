"""Stale launcher sockets on the node: a launcher killed without its cleanup leaves
``<uid>.sock`` behind in the shared socket directory. The handler removes a socket
only when no VMI on its node has that uid and nothing listens on it any more."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterable
from pathlib import Path

logger = logging.getLogger(__name__)


def stale(socket_dir: Path, live_uids: Iterable[str]) -> list[Path]:
    live = set(live_uids)
    out = []
    for path in sorted(socket_dir.glob("*.sock")):
        if path.stem in live or path.is_symlink() or not path.is_socket():
            continue
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            out.append(path)
        except OSError:
            continue  # busy or not ours to judge: leave it
        finally:
            probe.close()
    return out


def collect(socket_dir: Path, live_uids: Iterable[str]) -> int:
    removed = 0
    for path in stale(socket_dir, live_uids):
        try:
            path.unlink()
            removed += 1
            logger.info("removed stale launcher socket %s", path)
        except OSError as err:
            logger.warning("cannot remove stale socket %s: %s", path, err)
    return removed
