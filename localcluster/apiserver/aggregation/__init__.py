"""API aggregation: APIService objects proxy a group/version to a Service, as
kube-aggregator does.

``apiservices`` (pure: APIService validation, routes, the local APIServices of the
built-in groups, discovery of proxied groups; the write path validates APIServices with
it, so it sits below the backend); ``proxy`` (forwarding with the front-proxy headers,
the WebSocket relay, the ``Available`` check loop; over the backend); ``frontproxy_pki``
(the requestheader CA and the proxy's client certificate). Backends verify the proxy with
the top-level ``apiservice`` package.
"""
