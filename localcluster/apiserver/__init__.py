"""An in-process server speaking the Kubernetes REST API (objects in SQLite).

Run alone: ``python -m localcluster.apiserver --data-dir DIR [--port N]`` (writes
``DIR/kubeconfig``); embedded: :class:`localcluster.apiserver.server.APIServer` (async) or
:class:`localcluster.apiserver.threaded.ServerThread` (a background thread).

The map, top layer first (each layer imports only the layers below it; the import-linter
contract "the API server is layered" in pyproject.toml checks it):

- Entry points: ``server`` (wiring and the Python API: ``start``/``stop``, ``url``,
  ``kubeconfig_path``, ``ca_path``, ``token_for_service_account``, ``set_log_provider``,
  ``set_service_resolver``), ``threaded`` (the same in a thread), ``__main__`` (the CLI).
- ``handlers``: HTTP -- URL parsing, authentication, RBAC, lists, watches, Tables, logs.
- Request services over the backend: ``aggregation/`` (``proxy``: APIService
  proxying, the WebSocket relay, the Available check loop; ``frontproxy_pki``: the
  requestheader CA and the proxy's client certificate; backends verify the proxy with
  the top-level ``apiservice`` package); ``identity`` (bound-object checks,
  TokenRequest, TokenReview, SelfSubjectRulesReview, OIDC discovery documents);
  ``subresources`` (logs, binding); ``watch/`` (``stream``: watch streams;
  ``list_options``: paging, resourceVersionMatch, sendInitialEvents); ``controllers``
  (garbage collector, namespace and CRD cleanup, CRD serving, the root-CA publisher:
  ``kube-root-ca.crt`` in every namespace).
- ``backend``: the verbs on stored objects (create/update/patch/delete/scale).
- ``write_path``: the steps of a write, in order: decode → defaults → validation
  (metadata, schema prune/defaults/validation, CEL, built-in rules, APIService/CRD rules,
  immutability) → admission (mutating, then validating webhooks; a mutated object is
  validated again) → storage.
- ``admission/`` (``review``: the webhook protocol; ``webhooks``: the caller);
  ``rules/`` (pure rules of a write: ``meta``, ``defaults``, ``validation``,
  ``immutability``, ``crds``, ``names``, ``deletion``, ``gc``); ``wire/`` (request
  bodies: ``decoding`` -- JSON/YAML and fieldValidation -- and ``protobuf``).
- Pure packages: ``schema/`` (CRD schemas: ``pruning``, ``validation``, ``cel_rules``,
  ``structural``, ``go_regexp``, ``field_errors``); ``kinds/`` (served types:
  ``registry``, ``builtin_types``, ``builtin_schemas`` -- Kubernetes v1.32's
  definitions --, ``apiservices``, ``conversions``, ``scale``, ``discovery``,
  ``openapi``); ``patch/`` (``jsonpatch``, ``strategic``, ``strategic_types``);
  ``tables/`` (``convert``, ``printers``, ``columns``, ``jsonpath``); ``auth/``
  (``authn``: bearer tokens to users; ``sa_tokens``: signed JWT service-account tokens;
  ``rbac``, ``rbac_defaults``, ``authz``); ``streams/`` (exec/attach: ``remotecommand``
  over ``channels``; port-forward: ``portforward`` over WebSocket or ``spdy``;
  ``containers``).
- ``storage/``: ``store`` -- SQLite (WAL) + in-memory mirror, one global
  resourceVersion, a history table of recent events -- and ``watchcache``, the same
  events in memory for watchers. A watch from resourceVersion R replays the events after
  R from that history (which survives restarts: the newest ``history_limit`` events are
  kept), or answers 410 Expired when R is older than what is kept; the same history
  rebuilds the state at the first page's version for a paged list. Beside it:
  ``selectors`` (label and field selectors), ``tls``, ``kubeconfig``.
- ``errors``: Status objects, at the bottom.
"""
