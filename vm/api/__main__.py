"""``python -m vm.api``: virt-api in its pod (image ``rootdisk/operator``).

Makes or loads the certificate Secret, publishes the CA in the caBundles, reads the
front proxy's settings and serves on ``$POD_IP:8443`` (loopback outside a pod).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import ssl
import sys
import tempfile
from collections.abc import Callable
from typing import Any, TypeVar

from aiohttp import web

from apiservice import frontproxy
from kubeclient.startup import retry_startup
from pki.certs import write_pair
from vm.api import kube as api_kube
from vm.api.server import VirtAPI
from vm.kube import Kube, KubeError, load_config

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
    kube = Kube(load_config(args.kubeconfig))
    ca, serving = _retry("certificates", api_kube.ensure_pki, kube, args.namespace)
    _retry("publishing the CA", api_kube.publish_ca, kube, ca.cert_pem)
    proxy = _retry("front-proxy settings", api_kube.front_proxy, kube)
    with tempfile.TemporaryDirectory(prefix="virt-api-") as tmp:
        cert, key = write_pair(tmp, serving.cert_pem, serving.key_pem)
        server_ctx = frontproxy.server_ssl_context(proxy, cert_file=cert, key_file=key)
        handler_ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH,
                                                 cadata=ca.cert_pem.decode())
        handler_ctx.load_cert_chain(cert, key)
        app = VirtAPI(kube, proxy, handler_ctx, args.namespace).app()
        logger.info("serving on %s:%d", args.address, args.port)
        web.run_app(app, host=args.address, port=args.port, ssl_context=server_ctx,
                    print=None, access_log=None, handle_signals=True)
    return 0


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    sys.exit(main())
