"""The CDI servers' own certificates (the upload proxy, the cdi-apiserver): a rotating CA
kept in a Secret (:mod:`pki.rotation`); their serving certificate is issued again at
half its lifetime into the running server by :class:`pki.serving.Serving`.

Each server reads its CA's Secret at start and at every renewal, rotates it when due
(several replicas may race: each write is conditional on the resourceVersion read), and
publishes the CA bundle where its clients look (a ConfigMap, an APIService's
``caBundle``) before serving anything the new CA signed.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from kubeclient import Client, KubeError, Resource
from kubeclient.resources import SECRETS
from pki import rotation

logger = logging.getLogger(__name__)


def patched(kube: Client, kind: Resource, name: str, namespace: str | None, patch: Any) -> bool:
    """A merge patch carrying the resourceVersion it was made from; False on 409 (someone
    else wrote first)."""
    try:
        kube.patch(kind, name, patch, namespace)
        return True
    except KubeError as err:
        if err.status == 409:
            return False
        raise


def kept_authority(kube: Client, namespace: str, secret: str, *, ca_name: str,
                   now: dt.datetime, lifetime: dt.timedelta) -> rotation.Authority:
    """The CA in Secret ``secret``, made or rotated when due. Keys other than the
    authority's (an earlier version's serving certificate) are left as they are."""

    def read() -> tuple[dict[str, bytes], str] | None:
        found = kube.get_or_none(SECRETS, secret, namespace)
        return None if found is None else rotation.secret_data(found)

    def write(data: dict[str, bytes], version: str | None) -> bool:
        if version is None:
            return kube.create_if_absent(SECRETS, rotation.secret_object(secret, namespace, data)) \
                is not None
        logger.info("rotating CA %s (Secret %s/%s)", ca_name, namespace, secret)
        return patched(kube, SECRETS, secret, namespace,
                       {"metadata": {"resourceVersion": version},
                        "data": rotation.encoded(data)})

    return rotation.kept(read, write, name=ca_name, now=now, lifetime=lifetime)
