"""The kubeconfig the server writes for its admin, so kubectl and any client can connect.

The CA is embedded (``certificate-authority-data``) so the file is self-contained and can
be copied elsewhere.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

CONTEXT = "localcluster"


def render(*, server: str, ca_pem: bytes, token: str, user: str = "admin",
           namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {
            "server": server,
            "certificate-authority-data": base64.b64encode(ca_pem).decode(),
        }}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": CONTEXT, "context": {
            "cluster": CONTEXT, "user": user, "namespace": namespace}}],
        "current-context": CONTEXT,
        "preferences": {},
    }


def write(path: Path, config: dict[str, Any]) -> None:
    """Write atomically with mode 0600 (it holds a bearer token). JSON is valid YAML."""
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(config, f, indent=2)
    os.replace(tmp, path)
