"""``python -m vm.api``: virt-api in its pod (image ``rootdisk/operator``).

Makes, loads or rotates its CA (Secret ``virt-api-certs``), publishes the CA bundle in
the caBundles, reads the front proxy's settings and serves on ``$POD_IP:8443`` (loopback
outside a pod), renewing its certificate at half its life (``vm.api.certs``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from aiohttp import web

from apiservice import cabundle
from kubeclient import Client, KubeError, load_configuration
from kubeclient.startup import retry_startup
from pki import serving
from vm.api import certs
from vm.api import kube as api_kube
from vm.api.server import VirtAPI

logger = logging.getLogger("vm.api")
STARTUP_DEADLINE = 120.0


T = TypeVar("T")


def _retry(what: str, fn: Callable[..., T], *args: Any) -> T:
    return retry_startup("virt-api", what, lambda: fn(*args),
                         errors=(KubeError, RuntimeError, OSError), deadline=STARTUP_DEADLINE)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m vm.api")
    p.add_argument("--address", default=os.environ.get("POD_IP") or "127.0.0.1")
    p.add_argument("--port", type=int, default=8443)
    p.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE") or "kubevirt")
    p.add_argument("--kubeconfig", default=None)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        lifetimes = certs.lifetimes(os.environ)
    except ValueError as err:
        p.error(str(err))
    kube = Client(load_configuration(args.kubeconfig))
    bundles = cabundle.Keeper(lambda bundle: api_kube.publish_ca(kube, bundle))

    def issue() -> serving.Issued:
        issued = api_kube.issue_serving(kube, args.namespace, lifetimes=lifetimes)
        bundles.bundle = issued.bundle
        return issued

    first = _retry("certificates", issue)
    proxy = _retry("front-proxy settings", api_kube.front_proxy, kube)
    tls = certs.virt_api_tls(issue, first, proxy, lifetime=lifetimes[1])
    app = VirtAPI(kube, proxy, tls.handlers, args.namespace).app()
    app.cleanup_ctx.append(tls.renewal.keep_fresh)
    app.cleanup_ctx.append(bundles.keep)
    logger.info("serving on %s:%d", args.address, args.port)
    web.run_app(app, host=args.address, port=args.port, ssl_context=tls.server,
                print=None, access_log=None, handle_signals=True)
    return 0


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    sys.exit(main())
