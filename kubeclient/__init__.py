"""The project's one client of the Kubernetes API: dict in, dict out.

The controllers (cdi, populators, vm), the CLI and localcluster's node side all handle
custom resources and core kinds alike and want whole JSON objects, not the ``kubernetes``
package's generated models. So this rides on that package's ``ApiClient`` (its
configuration, TLS and token handling) and calls REST paths with plain JSON bodies.

- resources.py: every resource the project calls (group, version, plural, namespaced),
  defined once;
- errors.py: the API's failures as one exception tree (``NotFound``, ``Conflict``,
  ``AlreadyExists``, ``Forbidden``, ...);
- client.py: :class:`Client` and its verbs: ``get`` (raises ``NotFound``) /
  ``get_or_none`` / ``metadata`` / ``list`` / ``list_object``, ``create`` (raises
  ``AlreadyExists``) / ``create_if_absent``, ``replace`` / ``replace_status``, ``patch``
  (merge patch by default) / ``patch_status``, ``delete`` (idempotent, UID precondition),
  ``create_or_replace``, ``watch``, ``event`` (best effort), ``allowed``; the
  configuration found as kubectl and in-cluster clients find it;
- mergepatch.py, startup.py: merge patch computation, bounded start-up retries.
"""

from __future__ import annotations

from kubeclient import resources
from kubeclient.client import (
    JSON_PATCH,
    MERGE,
    METADATA_ONLY,
    STRATEGIC,
    Client,
    Obj,
    connection_params,
    event_body,
    load_configuration,
    shared,
)
from kubeclient.errors import (
    AlreadyExists,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    Unauthorized,
    api_error,
    is_conflict,
    is_not_found,
    is_stale,
)
from kubeclient.resources import Resource

__all__ = ["JSON_PATCH", "MERGE", "METADATA_ONLY", "STRATEGIC", "AlreadyExists", "BadRequest",
           "Client", "Conflict", "Forbidden", "Gone", "Invalid", "KubeError", "NotFound", "Obj",
           "Resource", "Unauthorized", "api_error", "connection_params", "event_body",
           "is_conflict", "is_not_found", "is_stale", "load_configuration", "resources",
           "shared"]
