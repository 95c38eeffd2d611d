"""An in-process server speaking the Kubernetes REST API (objects in SQLite).

Run alone: ``python -m localcluster.apiserver --data-dir DIR [--port N]`` (writes
``DIR/kubeconfig``); embedded: :class:`localcluster.apiserver.server.APIServer` (async) or
:class:`localcluster.apiserver.threaded.ServerThread` (a background thread).

How it is put together (one module per subject):

- ``server``: wiring and the Python API (``start``/``stop``, ``url``, ``kubeconfig_path``,
  ``ca_path``, ``token_for_service_account``, ``set_log_provider``,
  ``set_service_resolver``); ``threaded``: the same in a thread; ``__main__``: the CLI.
- ``handlers``: HTTP -- URL parsing, authentication, RBAC, lists, watches, Tables, logs;
  ``discovery`` and ``openapi``: what clients read to find types; ``protobuf``: the
  request bodies kubectl's imperative commands send; ``decoding``: JSON/YAML bodies and
  fieldValidation (unknown/duplicate fields, wrong types); ``list_options``: paging,
  resourceVersionMatch, sendInitialEvents.
- Strictness as upstream: ``builtin_schemas`` (Kubernetes v1.32's definitions of the
  built-in kinds, for decoding and OpenAPI), ``go_regexp`` (RE2 for CRD patterns),
  ``cel_rules`` (CRD ``x-kubernetes-validations``).
- ``backend``: the verbs on stored objects (create/update/patch/delete); ``webhooks``:
  admission calls; ``watch``: watch streams; ``subresources``: logs, binding;
  ``controllers``: garbage collector, namespace and CRD cleanup, CRD serving, the
  root-CA publisher (``kube-root-ca.crt`` in every namespace).
- Identity: ``auth`` (bearer tokens to users), ``sa_tokens`` (signed JWT service-account
  tokens: mint, verify, JWKS), ``identity`` (bound-object checks, TokenRequest,
  TokenReview, SelfSubjectRulesReview, OIDC discovery documents).
- Aggregation: ``apiservices`` (pure: APIService validation, routes, local APIServices,
  discovery of proxied groups), ``aggregator`` (proxying, WebSocket relay, the
  Available check loop), ``frontproxy_pki`` (requestheader CA and the proxy's client
  certificate). Backends verify the proxy with the top-level ``apiservice`` package.
- ``store``: SQLite (WAL) + in-memory mirror, one global resourceVersion, a history table
  of recent events; ``watchcache``: the same events in memory for watchers.
  A watch from resourceVersion R replays the events after R from that history (which
  survives restarts: the newest ``history_limit`` events are kept), or answers 410
  Expired when R is older than what is kept; the same history rebuilds the state at the
  first page's version for a paged list.
- Pure rules: ``meta`` (names, system metadata, generation), ``deletion`` (what a DELETE
  does), ``gc`` (owner references), ``immutability``, ``defaults``, ``crds``,
  ``conversions`` (events.k8s.io), ``registry``/``builtin_types`` (served types),
  ``errors`` (Status objects), ``authz``, ``tls``, ``kubeconfig``.
- Helpers shared with other parts: ``patches``, ``selectors``, ``schema``, ``rbac``,
  ``tables``, ``admission``.
"""
