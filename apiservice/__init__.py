"""Helpers for the backends of aggregated APIs (``APIService``s): the parts a backend
needs to trust the Kubernetes API server's front proxy. Imported by cdi/ and vm/ alike,
so it knows nothing of localcluster and talks to no API itself.

Use (an aiohttp backend such as the VM subresource server)::

    from apiservice import frontproxy

    cm = read ConfigMap kube-system/extension-apiserver-authentication  # any client
    config = frontproxy.FrontProxyConfig.from_configmap_data(cm["data"])
    ctx = frontproxy.server_ssl_context(config, cert_file=..., key_file=...)
    web.run_app(app, ssl_context=ctx)            # serving cert for <svc>.<ns>.svc

    # in a handler:
    who = frontproxy.authenticate_aiohttp(request, config)  # FrontProxyError -> 401
    # then authorize ``who`` with a SubjectAccessReview (user, groups, extra): the API
    # server checks RBAC before proxying too, but a backend must not rely on it.

The backend's ServiceAccount needs a RoleBinding in kube-system to the Role
``extension-apiserver-authentication-reader`` (to read the ConfigMap) and a
ClusterRoleBinding to ``system:auth-delegator`` (TokenReview, SubjectAccessReview).
The same works on a real cluster: kube-apiserver publishes the same ConfigMap.
"""
