"""``python -m localcluster.apiserver --data-dir DIR [--port N]``: the server alone."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from .server import APIServer


async def _serve(args: argparse.Namespace) -> None:
    server = APIServer(args.data_dir, port=args.port, host=args.host)
    await server.start()
    print(f"serving {server.url}; kubeconfig: {server.kubeconfig_path}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster.apiserver",
                                     description="An embedded Kubernetes API server.")
    parser.add_argument("--data-dir", required=True, help="where objects, TLS material and "
                                                          "the kubeconfig are kept")
    parser.add_argument("--port", type=int, default=0, help="HTTPS port (0: a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(_serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
