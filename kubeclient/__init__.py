"""One dict-in, dict-out door to the Kubernetes API, under every adapter of the project.

The controllers (cdi, populators, vm), the CLI and localcluster's node side all handle
custom resources and core kinds alike and want whole JSON objects, not the ``kubernetes``
package's generated models. So this rides on that package's ``ApiClient`` (its
configuration, TLS and token handling) and calls REST paths with plain JSON bodies.

What lives here is the part they share: the resource path (names quoted, so a name can
never add a path segment or a query), the error with the API's Status message, the
configuration found as kubectl and in-cluster clients find it, the raw JSON request, the
streamed watch and the Event body. Each adapter keeps its own verbs, with the idempotence
its callers rely on (``None`` on not found, "already exists" is fine, ...).
"""

from __future__ import annotations

from kubeclient.client import (
    JSON_PATCH,
    MERGE,
    STRATEGIC,
    Client,
    KubeError,
    Obj,
    Resource,
    connection_params,
    event_body,
    load_configuration,
)

__all__ = ["JSON_PATCH", "MERGE", "STRATEGIC", "Client", "KubeError", "Obj", "Resource",
           "connection_params", "event_body", "load_configuration"]
