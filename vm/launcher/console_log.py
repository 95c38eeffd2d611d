"""Follow the launcher's console log to stdout (``python -m vm.launcher.console_log``).

Why it exists: upstream's launcher pod has a ``guest-console-log`` container that prints
the serial console, so ``kubectl logs <pod> -c guest-console-log`` shows it; that
container runs this with the launcher's image. It prints the log from its start (the
rotated part first), then follows it across rotation, waiting for it to appear.
``--no-follow`` prints what is there and exits.

SIGTERM (the pod going: a guest that powered off, a VM stopped) ends it cleanly, with
exit code 0 as upstream's ``virt-tail``, after printing what the guest wrote since the
last poll: a guest that prints and powers off at once must not lose its last lines to
the poll interval.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable

DEFAULT = "/var/run/kubevirt-private/console.log"
POLL = 0.2


def _copy(fd: int, out: int) -> int:
    total = 0
    while chunk := os.read(fd, 65536):
        os.write(out, chunk)
        total += len(chunk)
    return total


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return False


def follow(path: str, *, out: int, follow: bool = True, stop_after: float | None = None,
           wait: Callable[[float], bool] = _sleep) -> None:
    """Copy the log (its rotated part first) to ``out``; with ``follow``, keep copying
    across rotation until ``stop_after`` seconds or until ``wait`` (called between polls)
    returns True, which ends it after one last pass over what is there."""
    deadline = None if stop_after is None else time.monotonic() + stop_after
    old = path + ".1"
    if os.path.exists(old) and os.path.exists(path):
        with open(old, "rb") as f:
            _copy(f.fileno(), out)
    fd = None
    while True:
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                if not follow:
                    return
        if fd is not None:
            _copy(fd, out)
            try:
                rotated = os.stat(path).st_ino != os.fstat(fd).st_ino
            except FileNotFoundError:
                rotated = True
            if rotated:
                _copy(fd, out)  # what was written before the rename
                os.close(fd)
                fd = None
                continue
            if not follow:
                os.close(fd)
                return
        if deadline is not None and time.monotonic() > deadline:
            if fd is not None:
                os.close(fd)
            return
        if wait(POLL):
            follow = False  # one last pass, then end


def _until_sigterm(seconds: float) -> bool:
    """Sleep, or return True at once when SIGTERM comes (blocked, so it waits here)."""
    return signal.sigtimedwait({signal.SIGTERM}, seconds) is not None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m vm.launcher.console_log")
    p.add_argument("path", nargs="?", default=DEFAULT)
    p.add_argument("--no-follow", action="store_true", help="print the log and exit")
    args = p.parse_args(argv)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        follow(args.path, out=sys.stdout.fileno(), follow=not args.no_follow,
               wait=_until_sigterm)
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
