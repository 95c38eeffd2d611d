"""The VM side's own small PKI: one CA, certificates signed by it (``pki.certs``).

virt-api makes the CA once and keeps it in Secret ``kubevirt/virt-api-certs``; its
serving certificate (for ``virt-api.<ns>.svc``, also good as a client certificate with
CN ``virt-api``) is what the API server checks through the webhook and APIService
``caBundle``s. Node handlers sign their own serving certificate with the same CA, so the
console relay between virt-api and a handler is mutually authenticated.
"""

from __future__ import annotations

API_CLIENT_CN = "virt-api"
