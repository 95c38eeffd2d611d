"""The ``scale`` subresource: an ``autoscaling/v1`` Scale view of a workload (pure).

``kubectl scale`` and autoscalers read and write replicas through it without knowing
the kind. Built-in kinds keep their replicas at ``spec.replicas``/``status.replicas`` and
report their label selector as a string; a custom resource names its own paths in its
CRD's ``subresources.scale`` (``specReplicasPath``, ``statusReplicasPath``, optional
``labelSelectorPath``), which must point into ``.spec`` and ``.status`` as upstream
requires.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import Cause

Obj = dict[str, Any]


@dataclass(frozen=True)
class ScalePaths:
    spec_replicas: tuple[str, ...]
    status_replicas: tuple[str, ...]
    label_selector: tuple[str, ...] | None
    """A path to a string selector (custom resources) or None: read ``spec.selector``."""


BUILTIN = ScalePaths(("spec", "replicas"), ("status", "replicas"), None)
BUILTIN_SCALABLE = frozenset({
    ("apps", "deployments"), ("apps", "replicasets"), ("apps", "statefulsets"),
    ("", "replicationcontrollers"),
})


class ScaleError(ValueError):
    """A Scale body or a CRD's scale paths are not acceptable; ``causes`` name the field."""

    def __init__(self, causes: list[Cause]) -> None:
        self.causes = causes
        super().__init__("; ".join(f"{c.field}: {c.message}" for c in causes))


def parse_path(path: str, *, field: str, root: str) -> tuple[str, ...]:
    """``.spec.replicas`` → ``("spec", "replicas")``; it must start at ``.<root>``."""
    parts = tuple(path.split(".")[1:]) if path.startswith(".") else ()
    if not parts or any(not p for p in parts) or parts[0] != root or len(parts) < 2:
        raise ScaleError([Cause("FieldValueInvalid",
                                f'Invalid value: "{path}": should be a json path under '
                                f".{root}", field)])
    return parts


def crd_paths(scale: Mapping[str, Any]) -> ScalePaths:
    """The paths a CRD version's ``subresources.scale`` declares (validated)."""
    prefix = "spec.versions[].subresources.scale"
    selector = str(scale.get("labelSelectorPath") or "")
    label_selector = None
    if selector:
        root = "status" if selector.startswith(".status") else "spec"
        label_selector = parse_path(selector, root=root, field=f"{prefix}.labelSelectorPath")
    return ScalePaths(
        spec_replicas=parse_path(str(scale.get("specReplicasPath") or ""), root="spec",
                                 field=f"{prefix}.specReplicasPath"),
        status_replicas=parse_path(str(scale.get("statusReplicasPath") or ""),
                                   root="status", field=f"{prefix}.statusReplicasPath"),
        label_selector=label_selector,
    )


def _get(obj: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    cur: Any = obj
    for part in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    return cur


def format_selector(selector: Mapping[str, Any] | None) -> str:
    """A LabelSelector as its string form (``a=b,c in (x,y),!d``), as metav1 prints it."""
    if not selector:
        return ""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op = expr.get("key"), expr.get("operator")
        values = ",".join(sorted(str(v) for v in expr.get("values") or []))
        parts.append({"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})",
                      "Exists": f"{key}", "DoesNotExist": f"!{key}"}.get(str(op), ""))
    return ",".join(p for p in parts if p)


def scale_of(obj: Mapping[str, Any], paths: ScalePaths, *, group: str) -> Obj:
    """The Scale object describing ``obj``."""
    meta = obj.get("metadata") or {}
    spec_replicas = _get(obj, paths.spec_replicas)
    if paths.label_selector is None:
        selector = format_selector((obj.get("spec") or {}).get("selector"))
    else:
        selector = str(_get(obj, paths.label_selector) or "")
    status: Obj = {"replicas": int(_get(obj, paths.status_replicas) or 0)}
    if selector:
        status["selector"] = selector
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                          "creationTimestamp") if k in meta},
        "spec": {"replicas": int(spec_replicas) if isinstance(spec_replicas, int) else 0},
        "status": status,
    }


def replicas_of(scale: Any) -> int:
    """The replicas a Scale body asks for.

    :raise ScaleError: when it is not a Scale or ``spec.replicas`` is not an integer ≥ 0.
    """
    if not isinstance(scale, Mapping) or scale.get("kind", "Scale") != "Scale":
        raise ScaleError([Cause("FieldValueInvalid", "Invalid value: the body must be an "
                                "autoscaling/v1 Scale", "kind")])
    replicas = (scale.get("spec") or {}).get("replicas", 0)
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise ScaleError([Cause("FieldValueInvalid", f"Invalid value: {replicas!r}: must be "
                                "an integer", "spec.replicas")])
    if replicas < 0:
        raise ScaleError([Cause("FieldValueInvalid", f"Invalid value: {replicas}: must be "
                                "greater than or equal to 0", "spec.replicas")])
    return replicas


def with_replicas(obj: Mapping[str, Any], paths: ScalePaths, replicas: int) -> Obj:
    """A copy of ``obj`` asking for ``replicas``."""
    out = copy.deepcopy(dict(obj))
    cur = out
    for part in paths.spec_replicas[:-1]:
        nxt = cur.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[part] = nxt
        cur = nxt
    cur[paths.spec_replicas[-1]] = replicas
    return out
