"""The test image ``rootdisk/tokenwatch``: prints the ``jti`` of the pod's mounted
service-account token, then waits (at most ``argv[1]`` seconds) for the kubelet to
replace it and prints the new one's ``jti`` and whether the API server accepts it."""

from __future__ import annotations

import base64
import json
import os
import ssl
import sys
import time
import urllib.request

SA = "/var/run/secrets/kubernetes.io/serviceaccount"


def _read() -> str:
    with open(f"{SA}/token") as fh:
        return fh.read()


def _jti(token: str) -> str:
    payload = token.split(".")[1]
    return str(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["jti"])


def main(limit: float) -> None:
    first = _read()
    print("first", _jti(first), flush=True)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        token = _read()
        if token != first:
            url = (f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:"
                   f"{os.environ['KUBERNETES_SERVICE_PORT']}/version")
            req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
            ctx = ssl.create_default_context(cafile=f"{SA}/ca.crt")
            with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
                print("rotated", _jti(token), resp.status, flush=True)
            return
        time.sleep(0.1)
    print("unchanged", flush=True)


if __name__ == "__main__":
    main(float(sys.argv[1]))
