"""Admission checks for DataImportCrons (pure), upstream's rules in upstream's order and
words (CDI c07cdb6fb, ``pkg/apiserver/webhooks/dataimportcron-validate.go``): the first
rule broken is the refusal, written ``field: message``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cdi.importcron import valid_schedule
from cdi.validate import Exists, spec_problems
from vocab import sources

NAME_MAX = 63  # validation.DNS1035LabelMaxLength, for the cron and its DataSource


def _name_length(name: Any) -> list[str]:
    if len(str(name or "")) > NAME_MAX:
        return [f"Name cannot be longer than {NAME_MAX} characters"]
    return []


def validate_cron_create(*, cron: Mapping[str, Any], exists: Exists) -> list[str]:
    problems = _name_length((cron.get("metadata") or {}).get("name"))
    if problems:
        return problems
    spec = cron.get("spec") or {}
    template = (spec.get("template") or {}).get("spec") or {}
    source = template.get("source") or {}
    if source.get(sources.REGISTRY) is None and source.get(sources.PVC) is None:
        return ["spec.Template: Missing source"]
    if template.get("sourceRef") is not None or template.get("contentType") \
            or template.get("checkpoints") or template.get("finalCheckpoint"):
        return ["spec.Template: Unsettable fields: SourceRef, ContentType, Checkpoints,"
                " FinalCheckpoint"]
    problems = spec_problems(template, exists, field="Template")
    if problems:
        return problems
    schedule = spec.get("schedule")
    if schedule and (not isinstance(schedule, str) or not valid_schedule(schedule)):
        return ["spec.Schedule: Illegal cron schedule"]
    keep = spec.get("importsToKeep")
    if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 0):
        return ["spec.ImportsToKeep: Illegal ImportsToKeep value"]
    if spec.get("garbageCollect") is not None and spec["garbageCollect"] not in (
            "Never", "Outdated"):
        return ["spec.GarbageCollect: Illegal GarbageCollect value"]
    if not spec.get("managedDataSource"):
        return ["spec.ManagedDataSource: Illegal ManagedDataSource value"]
    return _name_length(spec["managedDataSource"])


def validate_cron_update(*, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    problems = _name_length((new.get("metadata") or {}).get("name"))
    if problems:
        return problems
    if (old.get("spec") or {}) != (new.get("spec") or {}):
        return ["DataImportCron.Spec: Cannot update DataImportCron Spec"]
    return []
