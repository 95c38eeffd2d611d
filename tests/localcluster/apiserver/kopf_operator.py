"""A small kopf operator used by test_kopf.py, in-process and as ``kopf run``.

Namespaced ``kopfwidgets.example.net`` (create/update/delete handlers, a timer, status
patches, events; kopf's finalizer guards the delete handler) and cluster-scoped
``kopfgadgets.example.net``. It logs in from the ``KUBECONFIG`` the server wrote.
"""

from __future__ import annotations

from typing import Any

import kopf

GROUP, VERSION = "example.net", "v1"


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.watching.server_timeout = 5  # let the server end watches: exercises resumption
    settings.posting.level = 20


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return kopf.login_with_kubeconfig(**kwargs)


@kopf.on.create(GROUP, VERSION, "kopfwidgets")
def widget_created(body: Any, spec: Any, patch: Any, **_: Any) -> dict[str, Any]:
    patch.status["phase"] = "Created"
    kopf.info(body, reason="WidgetCreated", message=f"size {spec['size']}")
    return {"size": spec["size"]}


@kopf.on.update(GROUP, VERSION, "kopfwidgets", field="spec.size")
def widget_resized(old: Any, new: Any, patch: Any, **_: Any) -> None:
    patch.status["resized"] = f"{old}->{new}"


@kopf.on.delete(GROUP, VERSION, "kopfwidgets")
def widget_deleted(body: Any, **_: Any) -> None:
    kopf.info(body, reason="WidgetDeleted", message="cleaned up")


@kopf.timer(GROUP, VERSION, "kopfwidgets", interval=0.3)
def widget_tick(status: Any, patch: Any, **_: Any) -> None:
    patch.status["ticks"] = int(status.get("ticks") or 0) + 1


@kopf.on.create(GROUP, VERSION, "kopfgadgets")
def gadget_created(patch: Any, **_: Any) -> None:
    patch.status["phase"] = "Seen"
