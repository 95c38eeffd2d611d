"""Calling admission webhooks before a write, as kube-apiserver does.

For a write the server builds an AdmissionReview ``request`` (a :class:`Call`).
Every webhook of the Mutating/ValidatingWebhookConfigurations whose rules,
namespaceSelector and objectSelector match is POSTed an ``admission.k8s.io/v1``
AdmissionReview over HTTPS (``clientConfig.url``, or ``clientConfig.service`` resolved by
the caller to a loopback address while the certificate is checked against the service's
DNS name ``<name>.<namespace>.svc``), verified against ``caBundle``, bounded by
``timeoutSeconds``. Mutating webhooks run first, one by one in configuration-name order,
each seeing the object patched by the previous ones (base64 JSONPatch responses), and
``reinvocationPolicy: IfNeeded`` webhooks are called once more if a later webhook changed
the object; validating webhooks then run concurrently.

A write runs :func:`mutate` (before the object is validated) and :func:`validate` (after;
:func:`admit` runs both, as for a DELETE). A denial raises :class:`AdmissionDenied`
carrying the webhook's ``status`` as kube-apiserver keeps it (``ToStatusErr``): its reason
and details (``causes``…) untouched, a code under 400 made 400, the message
``admission webhook "<name>" denied the request: <message>`` (else its reason, else
``… without explanation``). ``warnings`` of every answer are collected before the allowed
check, so they reach the client with a denial too. A webhook that cannot be called,
times out or answers garbage (or more than ``MAX_RESPONSE_BYTES``) is skipped under
``failurePolicy: Ignore`` and is a 500 under ``Fail`` (the default). ``matchConditions``
(CEL) are not evaluated: a webhook whose rules match is called.

The namespace's labels, for ``namespaceSelector``, are passed as ``namespace_labels``
(None for cluster-scoped objects, which every namespaceSelector matches; for a Namespace
itself, its own labels are used).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import json
import logging
import ssl
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import aiohttp

from ..patch.jsonpatch import PatchError, json_patch
from ..selectors import SelectorError, label_selector_from_dict

logger = logging.getLogger(__name__)

ResolveService = Callable[[str, str, int], tuple[str, int]]
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
"""An AdmissionReview answer may carry a patch of an object (at most 3 MiB here), base64."""
_SELF = {"validatingwebhookconfigurations", "mutatingwebhookconfigurations",
         "validatingadmissionpolicies", "validatingadmissionpolicybindings"}


class AdmissionDenied(Exception):
    """The write is refused: by a webhook (``details`` is then its Status's details, kept
    as sent, and ``reason`` its reason, possibly empty) or by this server because a
    ``failurePolicy: Fail`` webhook could not be called (500) or does not support a dry
    run (400); ``details`` is None for those."""

    def __init__(self, code: int, message: str, *, reason: str = "",
                 details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details
        self.status = "Failure"
        self.reason = reason if details is not None else reason or {
            400: "BadRequest", 500: "InternalError"}.get(code, "")


class _CallFailed(Exception):
    """A webhook could not be asked or did not answer properly."""


@dataclass(frozen=True)
class _Hook:
    config: str
    spec: Mapping[str, Any]

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))

    @property
    def fail_closed(self) -> bool:
        return bool(self.spec.get("failurePolicy", "Fail") != "Ignore")


def _rule_matches(rule: Mapping[str, Any], request: Mapping[str, Any]) -> bool:
    resource = request.get("resource") or {}
    operation = request.get("operation", "")
    if not _listed(operation, rule.get("operations")):
        return False
    if not _listed(resource.get("group", ""), rule.get("apiGroups")):
        return False
    if not _listed(resource.get("version", ""), rule.get("apiVersions")):
        return False
    scope = rule.get("scope") or "*"
    # A Namespace's request carries its own name as namespace, but it is cluster-scoped.
    namespaced = bool(request.get("namespace")) and resource.get("resource") != "namespaces"
    if (scope == "Cluster" and namespaced) or (scope == "Namespaced" and not namespaced):
        return False
    name, sub = resource.get("resource", ""), request.get("subResource") or ""
    for pattern in rule.get("resources") or []:
        want_res, _, want_sub = pattern.partition("/")
        if want_res not in ("*", name):
            continue
        if sub == "" and "/" not in pattern:
            return True
        if sub and "/" in pattern and want_sub in ("*", sub):
            return True
    return False


def _listed(value: str, allowed: Any) -> bool:
    items = list(allowed or [])
    return "*" in items or value in items


def _labels(obj: Any) -> Mapping[str, str]:
    if not isinstance(obj, Mapping):
        return {}
    return (obj.get("metadata") or {}).get("labels") or {}


def _selector_matches(selector: Any, labels: Mapping[str, str]) -> bool:
    if not selector:
        return True
    try:
        return label_selector_from_dict(selector).matches(labels)
    except SelectorError:
        return False


def matching_webhooks(
    configs: Sequence[Mapping[str, Any]],
    request: Mapping[str, Any],
    *,
    obj: Mapping[str, Any] | None,
    namespace_labels: Mapping[str, str] | None,
) -> list[_Hook]:
    """The webhooks to call for ``request``, in kube-apiserver's order."""
    resource = request.get("resource") or {}
    if resource.get("group") == "admissionregistration.k8s.io" and \
            resource.get("resource") in _SELF:
        return []  # webhook configurations are never subject to webhooks
    hooks = []
    for config in sorted(configs, key=lambda c: str((c.get("metadata") or {}).get("name"))):
        config_name = str((config.get("metadata") or {}).get("name", ""))
        for spec in config.get("webhooks") or []:
            if not any(_rule_matches(r, request) for r in spec.get("rules") or []):
                continue
            if resource.get("resource") == "namespaces" and not request.get("subResource"):
                ns_labels: Mapping[str, str] | None = _labels(obj or request.get("oldObject"))
            else:
                ns_labels = namespace_labels
            if ns_labels is not None and not _selector_matches(spec.get("namespaceSelector"),
                                                               ns_labels):
                continue
            object_selector = spec.get("objectSelector")
            if object_selector and not any(
                    _selector_matches(object_selector, _labels(o))
                    for o in (obj, request.get("oldObject")) if o is not None):
                continue
            hooks.append(_Hook(config_name, spec))
    return hooks


def _endpoint(hook: _Hook, resolve_service: ResolveService) -> tuple[str, str | None]:
    """The URL to POST to and the TLS server name to verify (None: the URL's host)."""
    client = hook.spec.get("clientConfig") or {}
    timeout = int(hook.spec.get("timeoutSeconds") or 10)
    if client.get("url"):
        url = str(client["url"])
        return f"{url}{'&' if '?' in url else '?'}timeout={timeout}s", None
    service = client.get("service") or {}
    namespace, name = str(service.get("namespace", "")), str(service.get("name", ""))
    port = int(service.get("port") or 443)
    if not namespace or not name:
        raise _CallFailed("clientConfig needs a url or a service with namespace and name")
    host, real_port = resolve_service(namespace, name, port)
    path = str(service.get("path") or "/")
    if not path.startswith("/"):
        path = "/" + path
    return f"https://{host}:{real_port}{path}?timeout={timeout}s", f"{name}.{namespace}.svc"


def _ssl_context(hook: _Hook) -> ssl.SSLContext:
    bundle = (hook.spec.get("clientConfig") or {}).get("caBundle")
    if not bundle:
        return ssl.create_default_context()
    try:
        pem = base64.b64decode(bundle, validate=True).decode()
        return ssl.create_default_context(cadata=pem)
    except (binascii.Error, UnicodeDecodeError, ssl.SSLError, ValueError) as err:
        raise _CallFailed(f"invalid caBundle: {err}") from None


async def _call(hook: _Hook, review: dict[str, Any], resolve_service: ResolveService,
                session: aiohttp.ClientSession) -> dict[str, Any]:
    versions = hook.spec.get("admissionReviewVersions") or ["v1"]
    if "v1" not in versions:
        raise _CallFailed(f"webhook does not accept known AdmissionReview versions "
                          f"{list(versions)} (this server speaks v1)")
    url, server_name = _endpoint(hook, resolve_service)
    timeout = float(hook.spec.get("timeoutSeconds") or 10)
    try:
        async with session.post(
            url, json=review, ssl=_ssl_context(hook), server_hostname=server_name,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as reply:
            body = await _bounded_body(reply)
            if reply.status != 200:
                raise _CallFailed(f'Post "{url}": HTTP {reply.status}: '
                                  f"{body[:200].decode(errors='replace')}")
    except TimeoutError:
        raise _CallFailed(f'Post "{url}": context deadline exceeded (timeout '
                          f"{timeout:g}s)") from None
    except aiohttp.ClientError as err:
        raise _CallFailed(f'Post "{url}": {err}') from None
    try:
        answer = json.loads(body)
    except ValueError:
        raise _CallFailed("the response is not JSON") from None
    response = answer.get("response") if isinstance(answer, dict) else None
    if not isinstance(response, dict):
        raise _CallFailed("the AdmissionReview response has no 'response'")
    if answer.get("apiVersion") != "admission.k8s.io/v1" or answer.get("kind") != \
            "AdmissionReview":
        raise _CallFailed(f"expected admission.k8s.io/v1 AdmissionReview, got "
                          f"{answer.get('apiVersion')}/{answer.get('kind')}")
    if response.get("uid") != review["request"]["uid"]:
        raise _CallFailed(f"expected response.uid={review['request']['uid']!r}, got "
                          f"{response.get('uid')!r}")
    if not isinstance(response.get("allowed"), bool):
        raise _CallFailed("the response has no boolean 'allowed'")
    problem = _status_problem(response.get("status")) or _warnings_problem(
        response.get("warnings"))
    if problem:
        raise _CallFailed(problem)
    return response


async def _bounded_body(reply: aiohttp.ClientResponse) -> bytes:
    """The answer's body, refused past MAX_RESPONSE_BYTES (a webhook's answer is read
    whole, warnings and patch included: a runaway one must not fill this server)."""
    chunks, size = [], 0
    async for chunk in reply.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > MAX_RESPONSE_BYTES:
            raise _CallFailed(f"the response is larger than {MAX_RESPONSE_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _status_problem(status: Any) -> str:
    """Why ``response.status`` is not a Status (upstream's decoder would refuse it); ""."""
    if status is None:
        return ""
    if not isinstance(status, dict):
        return "the response's status is not an object"
    for key in ("message", "reason", "status"):
        if not isinstance(status.get(key, ""), str):
            return f"the response's status.{key} is not a string"
    code = status.get("code", 0)
    if isinstance(code, bool) or not isinstance(code, int):
        return "the response's status.code is not an integer"
    details = status.get("details")
    if details is None:
        return ""
    if not isinstance(details, dict):
        return "the response's status.details is not an object"
    causes = details.get("causes")
    if causes is not None and (not isinstance(causes, list) or not all(
            isinstance(c, dict) and all(isinstance(c.get(k, ""), str)
                                        for k in ("reason", "message", "field"))
            for c in causes)):
        return "the response's status.details.causes is not a list of causes"
    return ""


def _warnings_problem(warnings: Any) -> str:
    if warnings is None or (isinstance(warnings, list) and all(
            isinstance(w, str) for w in warnings)):
        return ""
    return "the response's warnings are not a list of strings"


def denial(webhook: str, status: Mapping[str, Any] | None) -> AdmissionDenied:
    """kube-apiserver's ToStatusErr: the webhook's ``status`` kept (reason, details, a
    status other than Success), a code under 400 made 400 (and, here only, one over 599:
    it could not be sent as an HTTP status)."""
    status = status or {}
    message, reason = status.get("message") or "", status.get("reason") or ""
    denied = f'admission webhook "{webhook}" denied the request'
    text = (f"{denied}: {message}" if message else f"{denied}: {reason}" if reason
            else f"{denied} without explanation")
    code = status.get("code") or 0
    if code < 400 or code > 599:
        code = 400
    outcome = status.get("status") or "Failure"
    err = AdmissionDenied(code, text, reason=reason, details=status.get("details") or {})
    err.status = "Failure" if outcome == "Success" else outcome
    return err


def _failure(hook: _Hook, err: Exception) -> AdmissionDenied:
    return AdmissionDenied(500, f'Internal error occurred: failed calling webhook '
                                f'"{hook.name}": failed to call webhook: {err}')


async def _ask(hook: _Hook, request: Mapping[str, Any], obj: Any,
               resolve_service: ResolveService, session: aiohttp.ClientSession,
               warnings: list[str] | None) -> dict[str, Any] | None:
    """The webhook's response, or None when it failed and may be ignored."""
    if request.get("dryRun") and hook.spec.get("sideEffects") not in ("None", "NoneOnDryRun"):
        raise AdmissionDenied(400, f'admission webhook "{hook.name}" does not support dry run')
    review_request = dict(request)
    review_request["object"] = obj
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": review_request}
    try:
        response = await _call(hook, review, resolve_service, session)
    except _CallFailed as err:
        if hook.fail_closed:
            raise _failure(hook, err) from None
        logger.warning("admission webhook %s failed, ignored by its failurePolicy: %s",
                       hook.name, err)
        return None
    if warnings is not None:
        warnings.extend(str(w) for w in response.get("warnings") or [])
    if not response["allowed"]:
        raise denial(hook.name, response.get("status"))
    return response


def _apply_patch(obj: dict[str, Any] | None,
                 response: Mapping[str, Any]) -> dict[str, Any] | None:
    patch = response.get("patch")
    if not patch:
        return obj
    if response.get("patchType", "JSONPatch") != "JSONPatch":
        raise _CallFailed(f"unsupported patchType {response.get('patchType')!r}")
    try:
        ops = json.loads(base64.b64decode(patch, validate=True))
    except (binascii.Error, ValueError) as err:
        raise _CallFailed(f"the patch is not base64 JSON: {err}") from None
    if not isinstance(obj, dict):
        raise _CallFailed("a webhook cannot patch a request without an object")
    try:
        return json_patch(obj, ops)
    except PatchError as err:
        raise _CallFailed(f"the patch does not apply: {err.message}") from None


Redefault = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Call:
    """One write's webhook call: the configurations, the AdmissionReview v1 ``request``
    without ``object`` (a missing ``uid`` is generated), how Services resolve, the
    namespace's labels and where the webhooks' warnings go."""

    mutating: Sequence[Mapping[str, Any]]
    validating: Sequence[Mapping[str, Any]]
    request: Mapping[str, Any]
    resolve_service: ResolveService
    namespace_labels: Mapping[str, str] | None = None
    warnings: list[str] | None = None

    def with_uid(self) -> Call:
        if self.request.get("uid"):
            return self
        return replace(self, request={**self.request, "uid": str(uuid.uuid4())})


async def mutate(call: Call, obj: dict[str, Any] | None, *,
                 redefault: Redefault | None = None) -> dict[str, Any] | None:
    """The mutating webhooks, one by one: the object they leave (``obj`` untouched).
    ``redefault`` runs after every patch, as kube-apiserver defaults a patched object
    again. Raises :class:`AdmissionDenied`."""
    current: dict[str, Any] | None = copy.deepcopy(obj)
    hooks = matching_webhooks(call.mutating, call.request, obj=current,
                              namespace_labels=call.namespace_labels)
    if not hooks:
        return current
    async with aiohttp.ClientSession() as session:
        return await _mutate(hooks, call, current, session, redefault)


async def validate(call: Call, obj: dict[str, Any] | None) -> None:
    """The validating webhooks, concurrently; the first denial (in configuration order)
    wins. Raises :class:`AdmissionDenied`."""
    hooks = matching_webhooks(call.validating, call.request, obj=obj,
                              namespace_labels=call.namespace_labels)
    if not hooks:
        return
    async with aiohttp.ClientSession() as session:
        results = await asyncio.gather(
            *(_ask(h, call.request, obj, call.resolve_service, session, call.warnings)
              for h in hooks), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


async def admit(
    *,
    mutating: Sequence[Mapping[str, Any]],
    validating: Sequence[Mapping[str, Any]],
    request: Mapping[str, Any],
    obj: dict[str, Any] | None,
    resolve_service: ResolveService,
    namespace_labels: Mapping[str, str] | None = None,
    warnings: list[str] | None = None,
) -> dict[str, Any] | None:
    """:func:`mutate` then :func:`validate` with nothing in between; return the object to
    store (mutated or not). Raises :class:`AdmissionDenied`."""
    call = Call(mutating, validating, request, resolve_service, namespace_labels,
                warnings).with_uid()
    current = await mutate(call, obj)
    await validate(call, current)
    return current


async def _mutate(hooks: list[_Hook], call: Call, current: dict[str, Any] | None,
                  session: aiohttp.ClientSession,
                  redefault: Redefault | None) -> dict[str, Any] | None:
    changed_after: dict[int, bool] = {}
    for i, hook in enumerate(hooks):
        before = current
        current = await _mutate_one(hook, call, current, session, redefault)
        if current != before:
            for j in range(i):
                changed_after[j] = True
    # reinvocationPolicy IfNeeded: once more for webhooks that ran before a later change.
    for i, hook in enumerate(hooks):
        if changed_after.get(i) and hook.spec.get("reinvocationPolicy") == "IfNeeded":
            current = await _mutate_one(hook, call, current, session, redefault)
    return current


async def _mutate_one(hook: _Hook, call: Call, current: dict[str, Any] | None,
                      session: aiohttp.ClientSession,
                      redefault: Redefault | None) -> dict[str, Any] | None:
    response = await _ask(hook, call.request, current, call.resolve_service, session,
                          call.warnings)
    if response is None:
        return current
    try:
        patched = _apply_patch(current, response)
        if patched is not current and patched is not None and redefault is not None:
            patched = redefault(patched)
        return patched
    except _CallFailed as err:
        if hook.fail_closed:
            raise _failure(hook, err) from None
        logger.warning("admission webhook %s returned a bad patch, ignored: %s", hook.name, err)
        return current
