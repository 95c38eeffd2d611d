"""Leader election over a coordination.k8s.io Lease: who holds it, and what to do (pure).

The holder renews ``renewTime`` well inside ``leaseDurationSeconds``; anyone else takes
the Lease over only once it has expired (or was released: empty holder). Writes go with
the resourceVersion read, so two candidates racing for one expired Lease cannot both win.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Action = Literal["create", "update", "wait"]


@dataclass(frozen=True)
class Decision:
    action: Action
    spec: dict[str, Any] | None = None


def micro_time(t: datetime.datetime) -> str:
    return t.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def decide(
    *, lease_spec: Mapping[str, Any] | None, exists: bool, identity: str,
    now: datetime.datetime, duration: int,
) -> Decision:
    """What ``identity`` should do with the Lease whose ``spec`` it just read."""
    stamp = micro_time(now)
    if not exists:
        return Decision("create", {"holderIdentity": identity, "leaseDurationSeconds": duration,
                                   "acquireTime": stamp, "renewTime": stamp,
                                   "leaseTransitions": 0})
    spec = dict(lease_spec or {})
    holder = spec.get("holderIdentity") or ""
    if holder == identity:
        return Decision("update", {**spec, "renewTime": stamp,
                                   "leaseDurationSeconds": duration})
    renewed = parse_time(spec.get("renewTime"))
    held_for = int(spec.get("leaseDurationSeconds") or duration)
    if holder and renewed is not None and renewed + datetime.timedelta(seconds=held_for) > now:
        return Decision("wait")
    return Decision("update", {"holderIdentity": identity, "leaseDurationSeconds": duration,
                               "acquireTime": stamp, "renewTime": stamp,
                               "leaseTransitions": int(spec.get("leaseTransitions") or 0) + 1})


def released(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The spec a holder writes when it steps down, so a successor need not wait."""
    out = {k: v for k, v in spec.items() if k != "holderIdentity"}
    out["leaseDurationSeconds"] = 1
    return out
