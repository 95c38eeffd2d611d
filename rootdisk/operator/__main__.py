"""``python -m rootdisk.operator --controllers vm``: import the sets' kopf modules, run kopf."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import sys
from typing import Any

import kopf

from rootdisk.operator import SETS


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m rootdisk.operator")
    p.add_argument("--controllers", required=True,
                   help=f"comma-separated controller sets: {', '.join(sorted(SETS))}")
    p.add_argument("--namespace", action="append", default=[],
                   help="watch only these namespaces (default: all)")
    p.add_argument("--liveness", default="",
                   help="serve kopf's liveness probe at this URL, e.g. http://0.0.0.0:8080/healthz")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    chosen = [s.strip() for s in args.controllers.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SETS]
    if not chosen or unknown:
        p.error(f"--controllers: unknown set(s) {', '.join(unknown) or '(none)'}; "
                f"known: {', '.join(sorted(SETS))}")
    args.sets = chosen
    return args


@kopf.on.startup()
def _configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 60
    settings.persistence.finalizer = "rootdisk.kubevirt.io/operator"


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in args.sets:
        for module in SETS[name]:
            importlib.import_module(module)
    asyncio.run(kopf.operator(
        standalone=True, clusterwide=not args.namespace, namespaces=args.namespace,
        liveness_endpoint=args.liveness or None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
