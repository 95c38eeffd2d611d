"""Follow the launcher's console log to stdout (``python -m vm.launcher.console_log``).

Why it exists: upstream's launcher pod has a ``guest-console-log`` container that prints
the serial console, so ``kubectl logs <pod> -c guest-console-log`` shows it; that
container runs this with the launcher's image. It prints the log from its start (the
rotated part first), then follows it across rotation, waiting for it to appear.
``--no-follow`` prints what is there and exits.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

DEFAULT = "/var/run/kubevirt-private/console.log"
POLL = 0.2


def _copy(fd: int, out: int) -> int:
    total = 0
    while chunk := os.read(fd, 65536):
        os.write(out, chunk)
        total += len(chunk)
    return total


def follow(path: str, *, out: int, follow: bool = True, stop_after: float | None = None) -> None:
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
            if not follow:
                os.close(fd)
                return
            try:
                rotated = os.stat(path).st_ino != os.fstat(fd).st_ino
            except FileNotFoundError:
                rotated = True
            if rotated:
                _copy(fd, out)
                os.close(fd)
                fd = None
                continue
        if deadline is not None and time.monotonic() > deadline:
            if fd is not None:
                os.close(fd)
            return
        time.sleep(POLL)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m vm.launcher.console_log")
    p.add_argument("path", nargs="?", default=DEFAULT)
    p.add_argument("--no-follow", action="store_true", help="print the log and exit")
    args = p.parse_args(argv)
    try:
        follow(args.path, out=sys.stdout.fileno(), follow=not args.no_follow)
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
