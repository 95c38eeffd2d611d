"""``python -m rootdisk.cloudguest [--refresh]``: build (or find) the Debian cloud guest
and print its qcow2's path."""

from __future__ import annotations

import argparse
import logging
import sys
import time

from rootdisk.cloudguest import CloudGuestError, build_cloud_guest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rootdisk.cloudguest")
    parser.add_argument("--refresh", action="store_true", help="fetch Debian's package lists first")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    started = time.monotonic()
    try:
        image = build_cloud_guest(refresh=args.refresh)
    except CloudGuestError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(image)
    logging.info("(%.1fs)", time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
