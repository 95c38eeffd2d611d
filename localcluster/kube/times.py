"""Timestamps as the Kubernetes API writes them, so every component formats them alike.

``metav1.Time`` fields (conditions, container states, Events) have second precision;
``metav1.MicroTime`` fields (a Lease's ``renewTime``) have microseconds.
"""

from __future__ import annotations

import datetime


def now() -> str:
    """The current time as a ``metav1.Time`` (RFC 3339, seconds, UTC)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_now() -> str:
    """The current time as a ``metav1.MicroTime`` (RFC 3339, microseconds, UTC)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
