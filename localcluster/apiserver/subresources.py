"""Subresources with their own request and response shapes: pods/log and pods/binding
(serviceaccounts/token is ``identity.py``; ``status`` and ``finalize`` are ordinary
updates: see backend).

Pod logs come from the node: the kubelet registers a provider (``APIServer.
set_log_provider``), called with keyword arguments ``namespace, pod, container, follow,
tail_lines, previous, timestamps, since_seconds, limit_bytes`` and returning an async
iterator of bytes; it raises LookupError/FileNotFoundError when there is nothing to show.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from .auth.authn import UserInfo
from .backend import MERGE_PATCH, Backend
from .errors import APIError, bad_request
from .kinds.registry import ResourceType
from .storage.store import Stored
from .streams.containers import pick_container
from .write_path import WriteOptions

logger = logging.getLogger(__name__)

Obj = dict[str, Any]
LogProvider = Callable[..., AsyncIterator[bytes]]


async def pod_logs(request: web.Request, *, stored: Stored, namespace: str, pod: str,
                   provider: LogProvider | None,
                   query: dict[str, Any]) -> web.StreamResponse:
    """Stream a container's log as text/plain (``query``: the parsed log options)."""
    container = pick_container(stored, pod, query.get("container"))
    if provider is None:
        raise bad_request(f'container "{container}" in pod "{pod}" is waiting to start: no '
                          "node runs this pod")
    limit = query.get("limit_bytes")
    iterator: AsyncIterator[bytes] | None
    try:
        iterator = provider(namespace=namespace, pod=pod, container=container,
                            follow=query["follow"], tail_lines=query["tail_lines"],
                            previous=query["previous"], timestamps=query["timestamps"],
                            since_seconds=query["since_seconds"],
                            limit_bytes=limit).__aiter__()
        first = await iterator.__anext__()
    except StopAsyncIteration:
        first, iterator = b"", None
    except (LookupError, FileNotFoundError) as err:
        raise bad_request(f'container "{container}" in pod "{pod}" has no logs: {err}') \
            from None
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    sent = 0
    try:
        chunk = first
        while True:
            if limit is not None:
                chunk = chunk[:max(0, limit - sent)]
            if chunk:
                await response.write(chunk)
                sent += len(chunk)
            if iterator is None or (limit is not None and sent >= limit):
                break
            try:
                chunk = await iterator.__anext__()
            except StopAsyncIteration:
                break
    except ConnectionError:
        pass  # the client went away
    except Exception:  # the provider failed mid-stream: end the stream, keep the server
        logger.exception("log stream of %s/%s (%s) failed", namespace, pod, container)
    with contextlib.suppress(ConnectionError, RuntimeError):
        await response.write_eof()
    return response


async def bind_pod(backend: Backend, rt: ResourceType, *, namespace: str, name: str,
                   body: Obj, user: UserInfo) -> Obj:
    """pods/binding: set ``spec.nodeName`` once (what a scheduler does)."""
    node = (body.get("target") or {}).get("name")
    if not node:
        raise bad_request("target.name: Required value")
    stored = backend.get_stored(rt, namespace, name)
    current = (stored.obj.get("spec") or {}).get("nodeName")
    if current:
        raise APIError(409, "Conflict", f'Operation cannot be fulfilled on pods/binding '
                                        f'"{name}": pod {name} is already assigned to node '
                                        f'"{current}"', name=name, kind="pods")
    await backend.patch(rt, namespace, name, MERGE_PATCH, {"spec": {"nodeName": node}},
                        options=WriteOptions(user=user))
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "code": 201}
