"""Rules a VirtualMachine must meet (upstream's VM admitter), with its warnings.

``spec.running`` is accepted with upstream's deprecation warning; together with
``spec.runStrategy``, or neither, or an unknown strategy, is refused. Every
dataVolumeTemplate must be used by a volume, live in the VM's namespace, and have
exactly one of ``pvc``/``storage`` and at most one source. The template's spec is checked
by the VMI rules under ``spec.template.spec``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vm.controller.runstrategy import InvalidRunStrategy, RunStrategy, run_strategy
from vm.webhooks.vmi_rules import Problem, validate_vmi_spec

RUNNING_DEPRECATED = "spec.running is deprecated, please use spec.runStrategy instead."


@dataclass(frozen=True)
class Verdict:
    problems: tuple[Problem, ...]
    warnings: tuple[str, ...]


def _templates(spec: Mapping[str, Any], namespace: str, out: list[Problem]) -> None:
    volumes = (((spec.get("template") or {}).get("spec") or {}).get("volumes")) or []
    used = {str((v.get("dataVolume") or {}).get("name")) for v in volumes
            if isinstance(v, Mapping) and isinstance(v.get("dataVolume"), Mapping)}
    used |= {str((v.get("persistentVolumeClaim") or {}).get("claimName")) for v in volumes
             if isinstance(v, Mapping) and isinstance(v.get("persistentVolumeClaim"), Mapping)}
    for i, t in enumerate(spec.get("dataVolumeTemplates") or []):
        f = f"spec.dataVolumeTemplates[{i}]"
        if not isinstance(t, Mapping):
            out.append(Problem(f, "must be an object"))
            continue
        meta = t.get("metadata") or {}
        name = meta.get("name")
        if not name:
            out.append(Problem(f"{f}.metadata.name", "required"))
        elif name not in used:
            out.append(Problem(f, f"DataVolumeTemplate {name!r} must be referenced in the "
                               "VMI template's 'volumes' list"))
        ns = meta.get("namespace")
        if ns and ns != namespace:
            out.append(Problem(f"{f}.metadata.namespace", f"{ns!r} differs from the VM's "
                               f"namespace {namespace!r}"))
        dv = t.get("spec") or {}
        if "pvc" in dv and "storage" in dv:
            out.append(Problem(f"{f}.spec", "pvc and storage are mutually exclusive"))
        elif "pvc" not in dv and "storage" not in dv:
            out.append(Problem(f"{f}.spec", "one of pvc or storage is required"))
        source = dv.get("source") or {}
        kinds = [k for k in source if source.get(k) is not None]
        if len(kinds) > 1:
            out.append(Problem(f"{f}.spec.source", f"must have one source, got "
                               f"{', '.join(kinds)}"))
        if kinds and dv.get("sourceRef"):
            out.append(Problem(f"{f}.spec", "source and sourceRef are mutually exclusive"))
        if not kinds and not dv.get("sourceRef"):
            out.append(Problem(f"{f}.spec.source", "a source or a sourceRef is required"))


def validate_vm(vm: Mapping[str, Any]) -> Verdict:
    out: list[Problem] = []
    warnings: list[str] = []
    spec = vm.get("spec")
    if not isinstance(spec, Mapping):
        return Verdict((Problem("spec", "required"),), ())
    if spec.get("running") is not None:
        warnings.append(RUNNING_DEPRECATED)
    try:
        strategy = run_strategy(spec)
    except InvalidRunStrategy as err:
        field, _, message = str(err).partition(": ")
        out.append(Problem(field, message))
    else:
        if strategy is RunStrategy.WAIT_AS_RECEIVER:
            out.append(Problem("spec.runStrategy", "WaitAsReceiver needs the "
                               "DecentralizedLiveMigration feature, which rootdisk lacks"))
    namespace = str((vm.get("metadata") or {}).get("namespace") or "")
    _templates(spec, namespace, out)
    template = spec.get("template")
    if not isinstance(template, Mapping):
        out.append(Problem("spec.template", "required"))
    else:
        out.extend(validate_vmi_spec(template.get("spec"), at="spec.template.spec"))
    return Verdict(tuple(out), tuple(warnings))
