"""Who is asking and what they may do.

``authn``: bearer tokens (the admin token, service-account JWTs) to a ``UserInfo``;
``sa_tokens``: signed service-account tokens (mint, verify, JWKS); ``rbac``: the RBAC
decision over Roles and bindings (pure), with ``rbac_defaults`` the bootstrap roles as
upstream's; ``authz``: that decision over the objects in the store. TokenRequest,
TokenReview and the other identity endpoints, which need the backend, are in
``..identity``.
"""
