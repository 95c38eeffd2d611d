"""Which container of a pod a logs, exec or attach request means, as kube-apiserver
picks it: the one named (init containers included), or the pod's only container."""

from __future__ import annotations

from ..errors import bad_request
from ..storage.store import Stored


def pick_container(stored: Stored, pod: str, wanted: str | None) -> str:
    spec = stored.obj.get("spec") or {}
    names = [c.get("name") for c in (spec.get("initContainers") or []) +
             (spec.get("containers") or [])]
    if not wanted:
        main = [c.get("name") for c in spec.get("containers") or []]
        if len(main) != 1:
            raise bad_request(f"a container name must be specified for pod {pod}, "
                              f"choose one of: [{' '.join(str(n) for n in main)}]")
        return str(main[0])
    if wanted not in names:
        raise bad_request(f"container {wanted} is not valid for pod {pod}")
    return wanted
