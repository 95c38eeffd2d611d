"""The import populator: VolumeImportSource → an importer pod filling PVC' (pure hooks).

It supplies the hooks of :class:`populators.flow.Populator`: the source object is in
the target's namespace; PVC' carries upstream's ``storage.import.*`` annotations; the pod
is :func:`populators.importer_pod.render`; the decision's stages are the shared ones
(:data:`populators.flow.STAGES`).
"""

from __future__ import annotations

from typing import Any

from populators import flow, import_source, importer_pod, names
from populators.cdiconfig import CdiConfig
from populators.claims import Obj, meta
from populators.errors import SourceError
from populators.importer_pod import Settings
from populators.progress import IMPORT_METRIC


def _parse(source: Obj) -> import_source.ImportSource:
    try:
        return import_source.parse(source)
    except SourceError as err:
        raise SourceError(f"VolumeImportSource {meta(source).get('name')}: {err}") from None


class ImportPopulator:
    kind = "VolumeImportSource"
    plural = "volumeimportsources"
    metric = IMPORT_METRIC
    stages = flow.STAGES

    def source_namespace(self, target: Obj) -> str:
        return str(meta(target).get("namespace"))

    def prime_namespace(self, target: Obj) -> str:
        return str(meta(target).get("namespace"))

    def pod_name(self, prime: str) -> str:
        return names.importer_pod_name(prime)

    def prime_annotations(self, source: Obj) -> dict[str, str]:
        return import_source.prime_annotations(_parse(source))

    def pod(self, *, target: Obj, prime: Obj, source: Obj, config: CdiConfig,
            settings: Settings, previous_restarts: int) -> dict[str, Any]:
        parsed = _parse(source)
        if parsed.content_type == "archive" and (prime.get("spec") or {}).get(
                "volumeMode") == "Block":
            raise SourceError("spec.contentType: ContentType Archive cannot have block "
                              "volumeMode")
        return importer_pod.render(source=parsed, prime=prime, target=target,
                                   config=config, settings=settings,
                                   previous_restarts=previous_restarts)
