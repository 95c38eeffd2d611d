"""The DataVolume reconcile's decisions (pure): a claim of the DataVolume's name made by
someone else (adopted: :func:`adoption_patch`, or refused: :func:`not_managed`), the
target claim to create (:func:`target`), and once the claim is settled, the plan of one
step, a value that :func:`cdi.reconcile.reconcile_datavolume` applies.

The shape is observe → decide → apply, as the populators' flow: ``cdi.reconcile`` reads
the DataVolume and its claim (adopting it, or creating the target claim and its source,
which are writes the claim it observes comes from), then :func:`decide` says what to write:
the new status (None when nothing changed), the Events announcing it (posted only once
that status was written, so they are never doubled), and what to delete once the
DataVolume is done (its VolumeImportSource / VolumeUploadSource, its VolumeCloneSource).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cdi import clone, snapshot_clone
from cdi.render import (
    RenderError,
    Target,
    import_source_name,
    owner_reference,
    render,
    source_kind,
    upload_source_name,
)
from cdi.status import Event, Waiting, events_for, observe, status_patch
from vocab import cdi as api

Obj = dict[str, Any]


def not_managed(name: str) -> tuple[str, str]:
    """Why a DataVolume does not take the claim of its name that someone else made
    (upstream's words)."""
    return ("ErrResourceExists",
            f'Resource "{name}" already exists and is not managed by DataVolume')


def adoption_patch(claim: Mapping[str, Any], dv: Mapping[str, Any]) -> Obj:
    """The merge patch by which ``dv`` adopts ``claim``: the DataVolume becomes an owner
    (not the controller when the claim has one), ``createdForDataVolume`` names it, and
    the claim's resourceVersion makes a concurrent change refuse it."""
    refs = list(claim["metadata"].get("ownerReferences") or [])
    ref = owner_reference(dv)
    if any(r.get("controller") for r in refs):
        ref["controller"] = False
    return {"metadata": {"ownerReferences": [*refs, ref],
                         "resourceVersion": claim["metadata"]["resourceVersion"],
                         "annotations": {api.CREATED_FOR_DV: dv["metadata"]["uid"]}}}


def target(*, dv: Mapping[str, Any], storage_class: Mapping[str, Any] | None,
           profile: Mapping[str, Any] | None, config_status: Mapping[str, Any] | None,
           clone_from: tuple[clone.SourceRef, clone.Source] | None,
           ) -> Target | tuple[str, str]:
    """The target claim and its source object to create (:func:`cdi.render.render`), or
    why there is none: a clone from a snapshot that does not fit the target waits (a
    :class:`cdi.status.Waiting`, upstream's validation message; the snapshot may change),
    any other render failure is the DataVolume's failure."""
    try:
        return render(dv=dv, storage_class=storage_class, profile=profile,
                      config_status=config_status, clone_from=clone_from)
    except RenderError as err:
        if clone_from is not None and clone_from[1].snapshot and \
                err.reason == api.CLONE_VALIDATION_FAILED:
            return Waiting(err.reason, snapshot_clone.validation_failed(err.message))
        return (err.reason, err.message)


@dataclass(frozen=True)
class Plan:
    phase: str | None
    """The DataVolume's phase after the step (what the reconcile returns)."""
    status: Obj | None = None
    """The status to write with the DataVolume's resourceVersion; None: unchanged."""
    events: tuple[Event, ...] = ()
    """Posted on the DataVolume once ``status`` was written (none when it was not)."""
    delete_import_source: str | None = None
    """The VolumeImportSource to delete (in the DataVolume's namespace)."""
    delete_upload_source: str | None = None
    delete_clone_source: bool = False
    """Delete the DataVolume's VolumeCloneSource, wherever it is."""


def decide(*, dv: Mapping[str, Any], claim: Mapping[str, Any] | None,
           storage_class: Mapping[str, Any] | None, failure: tuple[str, str] | None,
           now: str) -> Plan:
    """One step of the DataVolume ``dv`` given its claim (None: none, or not its own),
    that claim's class, and why no claim could be made (``failure``; a
    :class:`cdi.status.Waiting` one is also told in a Warning Event)."""
    previous = (dv.get("status") or {}).get("phase")
    if claim is None and failure is None and previous == api.FAILED:
        return Plan(phase=api.FAILED)  # failed before its claim was made: it stays so
    name = dv["metadata"]["name"]
    observed = observe(dv=dv, claim=claim, storage_class=storage_class, failure=failure)
    status = status_patch(dv=dv, observed=observed, claim_name=name, now=now)
    events: list[Event] = []
    if status is not None:
        src = clone.pvc_source(dv) or clone.snapshot_source(dv) or clone.data_source_ref(dv)
        events = events_for(previous=previous, observed=observed, claim_name=name,
                            clone=(src.namespace, src.name, dv["metadata"]["namespace"])
                            if src else None,
                            upload=source_kind(dv) == "upload",
                            clone_kind=src.kind if src else clone.PVC)
        if isinstance(failure, Waiting):
            events.append(Event("Warning", failure[0], failure[1]))
    uid = dv["metadata"]["uid"]
    succeeded = observed.phase == api.SUCCEEDED
    return Plan(
        phase=observed.phase, status=status, events=tuple(events),
        delete_import_source=import_source_name(uid) if succeeded else None,
        delete_upload_source=upload_source_name(uid)
        if succeeded and source_kind(dv) == "upload" else None,
        delete_clone_source=observed.phase in (api.SUCCEEDED, api.FAILED)
        and not clone.keeps_clone_source(dv))
