"""A DataImportCron's decisions (pure): when to poll, what to import, what to keep.

As upstream CDI c07cdb6fb (``dataimportcron-controller.go``): the cron polls its
registry source's digest on creation and on its ``schedule`` (the next time is the
annotation ``…/storage.import.nextCronTime``; one in the past makes the next reconcile
poll), keeps the pending digest in ``…/storage.import.sourceDesiredDigest``, imports each
new digest into a DataVolume named ``<managedDataSource>-<12 hex digits of the digest>``
from its template (the url pinned to ``@sha256:…``), points its managed DataSource at the
newest claim that succeeded, and garbage-collects the oldest claims beyond
``importsToKeep`` (by ``…/storage.import.lastUseTime``). The conditions ``UpToDate`` and
``Progressing`` say where it stands, with upstream's reasons and messages.

:func:`should_poll` decides whether to read the registry (the I/O is the caller's);
:func:`decide` turns what was observed into a :class:`Plan` the caller applies.
"""

from __future__ import annotations

import copy
import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from croniter import croniter

from vocab import cdi as api
from vocab import sources

Obj = dict[str, Any]
DEFAULT_IMPORTS_TO_KEEP = 3
DIGEST_SUFFIX_LENGTH = 12
NAME_MAX = 253
TOUCH_AFTER = dt.timedelta(minutes=10)
"""A kept claim's lastUseTime is renewed at most this often (upstream writes it on every
reconcile; here a resync revisits every cron every few seconds)."""
DV_NAME_KEY = "DataVolumeName"
DIGEST_KEY = "Digest"
"""``status.currentImports[]`` keys, capitalised as upstream's JSON tags spell them."""
POLL_RETRY = dt.timedelta(seconds=30)
"""After a failed poll, the next try (never later than the schedule's next time)."""

# Condition reasons (upstream's dataimportcron-conditions.go)
NO_DIGEST = "NoDigest"
NO_IMPORT = "NoImport"
OUTDATED = "Outdated"
SCHEDULED = "ImportScheduled"
IN_PROGRESS = "ImportProgressing"
UP_TO_DATE = "UpToDate"
PVC_FORMAT = "pvc"
SNAPSHOT_FORMAT = "snapshot"
ERRONEOUS_REASONS = ("Error", "ImagePullFailed")
"""A DataVolume whose Running condition is False for one of these is deleted and the
digest imported again (upstream's ``deleteErroneousDataVolume``)."""

_DESCRIPTORS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
                "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
                "@hourly": "0 * * * *"}
_EVERY = re.compile(r"^@every\s+((?:\d+(?:\.\d+)?(?:h|m|s|ms))+)$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


class ScheduleError(ValueError):
    """The schedule is not a standard cron expression."""


def next_time(schedule: str, after: dt.datetime) -> dt.datetime:
    """The first time after ``after`` the schedule names, as robfig/cron's
    ``ParseStandard`` reads it: five fields, a descriptor (``@daily``…) or
    ``@every <duration>``."""
    text = " ".join(schedule.split())
    every = _EVERY.match(text)
    if every:
        seconds = sum(float(n) * _UNITS[u] for n, u in _DURATION_PART.findall(every[1]))
        if seconds < 1:
            raise ScheduleError(f"@every needs at least a second: {schedule!r}")
        return after + dt.timedelta(seconds=seconds)
    expression = _DESCRIPTORS.get(text, text)
    if len(expression.split()) != 5 or not croniter.is_valid(expression):
        raise ScheduleError(f"not a standard cron expression: {schedule!r}")
    nxt: dt.datetime = croniter(expression, after).get_next(dt.datetime)
    return nxt


def valid_schedule(schedule: str) -> bool:
    try:
        next_time(schedule, dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    except ScheduleError:
        return False
    return True


def resource_name(base: str, suffix: str, max_length: int = NAME_MAX) -> str:
    """``base-suffix``, shortened as openshift's ``naming.GetName`` (upstream's
    ``GetResourceName``) when longer than ``max_length``."""
    name = f"{base}-{suffix}"
    if len(name) <= max_length:
        return name
    base_length = max_length - 10 - len(suffix)
    if base_length < 0:
        prefix = base[:min(len(base), max(0, max_length - 9))]
        return f"{prefix}-{_fnv32a(name)}"[:max_length]
    return f"{base[:base_length]}-{_fnv32a(base)}-{suffix}"


def _fnv32a(text: str) -> str:
    h = 0x811C9DC5
    for byte in text.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return f"{h:08x}"


def dv_name(managed_data_source: str, digest: str) -> str:
    """Upstream's ``createDvName``: the DataSource's name and 12 digits of the digest."""
    for prefix in ("sha256:", "uid:"):
        if digest.startswith(prefix):
            suffix = digest[len(prefix):len(prefix) + DIGEST_SUFFIX_LENGTH]
            if len(suffix) < DIGEST_SUFFIX_LENGTH:
                raise ValueError("Digest is too short")
            return resource_name(managed_data_source, suffix)
    raise ValueError("Digest has no supported prefix")


def untagged(url: str) -> str:
    """``docker://host/repo:tag`` → ``docker://host/repo`` (a digest is appended)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    rest = rest.split("@", 1)[0]
    slash, colon = rest.rfind("/"), rest.rfind(":")
    if colon > slash:
        rest = rest[:colon]
    return f"{scheme}://{rest}"


def rfc3339(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_nano(when: dt.datetime) -> str:
    """Go's ``time.RFC3339Nano``: the fraction without trailing zeros (none when zero)."""
    text = when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".")
    return text + "Z"


def parse_time(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


# -- the spec ----------------------------------------------------------------------------

def _spec(cron: Mapping[str, Any]) -> Mapping[str, Any]:
    return cron.get("spec") or {}


def imports_to_keep(cron: Mapping[str, Any]) -> int:
    value = _spec(cron).get("importsToKeep")
    return value if isinstance(value, int) and value >= 0 else DEFAULT_IMPORTS_TO_KEEP


def collects_garbage(cron: Mapping[str, Any]) -> bool:
    return _spec(cron).get("garbageCollect") in (None, "Outdated")


def cleans_up(cron: Mapping[str, Any]) -> bool:
    """``retentionPolicy: None``: what the cron made goes with it."""
    return _spec(cron).get("retentionPolicy") == "None"


def registry_url(cron: Mapping[str, Any]) -> str | None:
    source = (((_spec(cron).get("template") or {}).get("spec") or {}).get("source") or {})
    url = (source.get(sources.REGISTRY) or {}).get("url")
    return url if isinstance(url, str) and url else None


_ALLOWED_LABEL = re.compile(r"^([\w.]+\.kubevirt\.io|kubevirt\.io)/[\w.-]+$")
"""Upstream's ``CopyAllowedLabels`` pattern: the cron's ``*kubevirt.io/`` labels (the
default instancetype and preference among them) go onto what it makes."""


def managed_labels(cron: Mapping[str, Any]) -> dict[str, str]:
    """The labels a cron puts on what it manages (upstream's
    ``setDataImportCronResourceLabels``)."""
    meta = cron.get("metadata") or {}
    name = str(meta.get("name"))
    labels = {k: str(v) for k, v in (meta.get("labels") or {}).items()
              if isinstance(k, str) and _ALLOWED_LABEL.match(k)}
    labels[api.CRON_LABEL] = name
    if cleans_up(cron):
        labels[api.CRON_CLEANUP_LABEL] = "true"
    return labels


# -- polling -----------------------------------------------------------------------------

def should_poll(cron: Mapping[str, Any], now: dt.datetime) -> bool:
    """Whether this reconcile reads the registry: a schedule, a registry url, and no
    next time or one not in the future (a new cron polls at once)."""
    if not _spec(cron).get("schedule") or registry_url(cron) is None:
        return False
    annotations = (cron.get("metadata") or {}).get("annotations") or {}
    when = parse_time(annotations.get(api.NEXT_CRON_TIME))
    return when is None or when <= now


@dataclass(frozen=True)
class Poll:
    """What a poll found: the digest, or why there is none."""

    digest: str | None = None
    error: str | None = None


# -- the decision --------------------------------------------------------------------------

@dataclass(frozen=True)
class Observed:
    cron: Mapping[str, Any]
    now: dt.datetime
    dv: Mapping[str, Any] | None = None
    """The DataVolume of the current import (``status.currentImports[0]``)."""
    pvc: Mapping[str, Any] | None = None
    """The claim of that name."""
    existing: Mapping[str, Any] | None = None
    """A claim of the name a new digest would take (imported before: reused)."""
    data_source: Mapping[str, Any] | None = None
    claims: Sequence[Mapping[str, Any]] = ()
    """The claims labelled with the cron's name (garbage collection's candidates)."""
    poll: Poll | None = None
    """None: no poll this time."""
    format: str = PVC_FORMAT
    """The StorageProfile's ``dataImportCronSourceFormat``: ``pvc`` or ``snapshot``."""
    snapshot: Mapping[str, Any] | None = None
    """The VolumeSnapshot of the current import's name."""
    snapshots: Sequence[Mapping[str, Any]] = ()
    """The VolumeSnapshots labelled with the cron's name."""
    snapshot_class: str | None = None
    """The class for a new snapshot (None: the driver's default)."""


@dataclass
class Plan:
    annotations: dict[str, str | None] = field(default_factory=dict)
    """A merge patch of the cron's annotations (empty: none)."""
    status: Obj | None = None
    """The cron's new status (None: unchanged)."""
    create_dv: Obj | None = None
    touch_claim: tuple[str, dict[str, str], dict[str, str]] | None = None
    """(name, labels, annotations) to merge into a kept claim."""
    touch_snapshot: tuple[str, dict[str, str], dict[str, str]] | None = None
    """The same for a kept VolumeSnapshot (the snapshot format)."""
    delete_dv: str | None = None
    """An erroneous DataVolume of the current import, deleted to import again."""
    collect: list[str] = field(default_factory=list)
    """Old imports to delete (the DataVolume, else the claim)."""
    collect_snapshots: list[str] = field(default_factory=list)
    create_snapshot: Obj | None = None
    """The snapshot format: a VolumeSnapshot of the import that succeeded."""
    delete_import: str | None = None
    """The snapshot format: the DataVolume (else claim) whose snapshot is ready."""
    delete_snapshot: str | None = None
    """A snapshot of the current import while the format is ``pvc``."""
    create_data_source: Obj | None = None
    data_source_source: Obj | None = None
    """The managed DataSource's new ``spec.source`` (None: unchanged)."""
    events: list[tuple[str, str, str]] = field(default_factory=list)


def _condition(conditions: list[Obj], ctype: str, status: str, message: str, reason: str,
               now: str) -> None:
    """Upstream's ``updateConditionState``: the heartbeat moves when anything changed,
    the transition time when the status did."""
    cond = next((c for c in conditions if c.get("type") == ctype), None)
    if cond is None:
        cond = {"type": ctype}
        conditions.append(cond)
    changed_status = cond.get("status") != status
    if changed_status or cond.get("message") != message or cond.get("reason") != reason:
        if changed_status:
            cond["status"] = status
            cond["lastTransitionTime"] = now
        cond["lastHeartbeatTime"] = now
        cond["reason"], cond["message"] = reason, message


def _phase(obj: Mapping[str, Any] | None) -> str:
    return str(((obj or {}).get("status") or {}).get("phase") or "")


def _erroneous(dv: Mapping[str, Any]) -> bool:
    for cond in (dv.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Running" and cond.get("status") == "False" \
                and cond.get("reason") in ERRONEOUS_REASONS:
            return True
    return False


def new_data_volume(cron: Mapping[str, Any], name: str, digest: str, now: dt.datetime) -> Obj:
    """Upstream's ``newSourceDataVolume``: the template, the url pinned to the digest."""
    meta = cron.get("metadata") or {}
    template = copy.deepcopy(_spec(cron).get("template") or {})
    dv: Obj = {"apiVersion": api.API_VERSION, "kind": "DataVolume",
               "metadata": dict(template.get("metadata") or {}),
               "spec": template.get("spec") or {}}
    url = registry_url(cron)
    if url is not None:
        dv["spec"]["source"][sources.REGISTRY]["url"] = f"{untagged(url)}@{digest}"
    dv["metadata"].update(name=name, namespace=meta.get("namespace"))
    for key in ("uid", "resourceVersion", "creationTimestamp", "generation"):
        dv["metadata"].pop(key, None)
    dv["metadata"]["labels"] = {**(dv["metadata"].get("labels") or {}), **managed_labels(cron)}
    annotations = dict(dv["metadata"].get("annotations") or {})
    annotations[api.IMMEDIATE_BINDING] = "true"
    annotations[api.LAST_USE_TIME] = rfc3339_nano(now)
    retain = (meta.get("annotations") or {}).get(api.POD_RETAIN)
    if retain:
        annotations[api.POD_RETAIN] = retain
    dv["metadata"]["annotations"] = annotations
    return dv


def decide(seen: Observed) -> Plan:
    cron, now = seen.cron, seen.now
    meta = cron.get("metadata") or {}
    namespace = str(meta.get("namespace"))
    spec = _spec(cron)
    old_status: Obj = dict(cron.get("status") or {})
    status: Obj = copy.deepcopy(old_status)
    conditions: list[Obj] = status.setdefault("conditions", [])
    stamp = rfc3339(now)
    plan = Plan()
    annotations = dict(meta.get("annotations") or {})
    imports: list[Obj] = list(status.get("currentImports") or [])
    succeeded = False
    labels = managed_labels(cron)

    def touch(obj: Mapping[str, Any]) -> tuple[str, dict[str, str], dict[str, str]] | None:
        """Upstream's ``updateSource``: the cron's labels and lastUseTime on a kept one."""
        cmeta = obj.get("metadata") or {}
        have_labels = cmeta.get("labels") or {}
        last = parse_time((cmeta.get("annotations") or {}).get(api.LAST_USE_TIME))
        if any(have_labels.get(k) != v for k, v in labels.items()) or last is None \
                or now - last >= TOUCH_AFTER:
            return (str(cmeta.get("name")), labels, {api.LAST_USE_TIME: rfc3339_nano(now)})
        return None

    def keep(claim: Mapping[str, Any]) -> None:
        plan.touch_claim = touch(claim)
        if seen.format == SNAPSHOT_FORMAT:
            _snapshot_of(seen, claim, labels, plan)

    if seen.dv is not None:
        phase = _phase(seen.dv)
        if phase == api.SUCCEEDED:
            succeeded = True
            if seen.pvc is not None:
                keep(seen.pvc)
        elif phase == api.IMPORT_SCHEDULED:
            _condition(conditions, api.CRON_PROGRESSING, "False", "Import is scheduled",
                       SCHEDULED, stamp)
        elif phase == api.IMPORT_IN_PROGRESS:
            _condition(conditions, api.CRON_PROGRESSING, "True", "Import is progressing",
                       IN_PROGRESS, stamp)
        else:
            _condition(conditions, api.CRON_PROGRESSING, "False",
                       f"Import DataVolume phase {phase}", phase, stamp)
    elif seen.pvc is not None and _phase(seen.pvc) == "Bound":
        succeeded = True
        keep(seen.pvc)
    elif seen.snapshot is not None:
        if seen.format == PVC_FORMAT:
            # the format went back to pvc: the snapshot goes, the digest is imported again
            plan.delete_snapshot = str((seen.snapshot.get("metadata") or {}).get("name"))
        else:
            plan.touch_snapshot = touch(seen.snapshot)
            succeeded = True
    else:
        if imports:
            imports = imports[1:]
            status["currentImports"] = imports
        _condition(conditions, api.CRON_PROGRESSING, "False", "No current import", NO_IMPORT,
                   stamp)

    if succeeded:
        last = {"namespace": namespace, "name": imports[0][DV_NAME_KEY]}
        if status.get("lastImportedPVC") != last:
            status["lastImportedPVC"] = last
            status["lastImportTimestamp"] = stamp
        _condition(conditions, api.CRON_PROGRESSING, "False", "No current import", NO_IMPORT,
                   stamp)
        if collects_garbage(cron):
            plan.collect = _garbage(seen.claims, keep_count=imports_to_keep(cron),
                                    touched=plan.touch_claim)
            plan.collect_snapshots = _garbage(seen.snapshots, keep_count=imports_to_keep(cron),
                                              touched=plan.touch_snapshot)

    _data_source(seen, cron, status, plan)

    if spec.get("schedule") and registry_url(cron) is not None:
        try:
            scheduled = next_time(str(spec["schedule"]), now)
        except ScheduleError:
            plan.events.append(("Warning", "InvalidSchedule",
                                f"spec.schedule: {spec['schedule']!r} is not a cron schedule"))
            scheduled = None
        if seen.poll is not None:
            if seen.poll.digest:  # upstream's poller writes both only when it got one
                annotations[api.LAST_CRON_TIME] = stamp
                annotations[api.SOURCE_DESIRED_DIGEST] = seen.poll.digest
            elif seen.poll.error:
                plan.events.append(("Warning", "DigestPollFailed", seen.poll.error))
                if scheduled is not None:
                    scheduled = min(scheduled, now + POLL_RETRY)
        stored = parse_time(annotations.get(api.NEXT_CRON_TIME))
        if scheduled is not None and (seen.poll is not None or stored is None
                                      or stored > scheduled):
            # upstream writes the next time on every reconcile; here only when it moves
            # on (a poll) or is missing or later than the schedule says, so an @every
            # schedule does not rewrite it (and wake the cron) on each reconcile
            annotations[api.NEXT_CRON_TIME] = rfc3339(scheduled)

    desired = annotations.get(api.SOURCE_DESIRED_DIGEST) or ""
    updated = bool(desired) and (not imports or desired != imports[0].get(DIGEST_KEY))
    if updated:
        _condition(conditions, api.CRON_UP_TO_DATE, "False",
                   "Source digest updated since last import", OUTDATED, stamp)
        if seen.dv is not None and _erroneous(seen.dv):
            plan.delete_dv = str((seen.dv.get("metadata") or {}).get("name"))
            status["currentImports"] = imports = []
        if succeeded or not imports:
            _import(seen, cron, desired, status, plan)
    elif succeeded:
        status["sourceFormat"] = seen.format
        if seen.format == PVC_FORMAT or (seen.snapshot is not None and _ready(seen.snapshot)):
            _condition(conditions, api.CRON_UP_TO_DATE, "True", "Latest import is up to date",
                       UP_TO_DATE, stamp)
        elif seen.snapshot is not None:
            _condition(conditions, api.CRON_UP_TO_DATE, "False",
                       "Snapshot of imported data is progressing", IN_PROGRESS, stamp)
    elif imports:
        _condition(conditions, api.CRON_UP_TO_DATE, "False", "Import is progressing",
                   IN_PROGRESS, stamp)
    else:
        _condition(conditions, api.CRON_UP_TO_DATE, "False", "No source digest", NO_DIGEST,
                   stamp)

    last_cron = parse_time(annotations.get(api.LAST_CRON_TIME))
    if last_cron is not None:
        status["lastExecutionTimestamp"] = rfc3339(last_cron)

    before = meta.get("annotations") or {}
    plan.annotations = {k: v for k, v in annotations.items() if before.get(k) != v}
    if status != old_status:
        plan.status = status
    return plan


def _import(seen: Observed, cron: Mapping[str, Any], digest: str, status: Obj,
            plan: Plan) -> None:
    """A DataVolume for ``digest`` (upstream's ``createImportDataVolume``); a claim of its
    name imported before is reused."""
    managed = str(_spec(cron).get("managedDataSource") or "")
    try:
        name = dv_name(managed, digest)
    except ValueError as err:
        plan.events.append(("Warning", "InvalidDigest", f"{digest}: {err}"))
        return
    status["currentImports"] = [{DV_NAME_KEY: name, DIGEST_KEY: digest}]
    if seen.existing is not None:
        touch = (name, managed_labels(cron), {api.LAST_USE_TIME: rfc3339_nano(seen.now)})
        if seen.existing.get("kind") == api.VOLUME_SNAPSHOT_KIND:
            plan.touch_snapshot = touch
        else:
            plan.touch_claim = touch
        return
    plan.create_dv = new_data_volume(cron, name, digest, seen.now)


def _ready(snapshot: Mapping[str, Any]) -> bool:
    return (snapshot.get("status") or {}).get("readyToUse") is True


def _snapshot_of(seen: Observed, claim: Mapping[str, Any], labels: dict[str, str],
                 plan: Plan) -> None:
    """Upstream's ``handleSnapshot``: a VolumeSnapshot of the import's claim, of its name;
    once it is ready the DataVolume and claim go (the snapshot is the golden image)."""
    cmeta = claim.get("metadata") or {}
    name = str(cmeta.get("name"))
    if seen.snapshot is not None:
        if _ready(seen.snapshot):
            plan.delete_import = name
        return
    spec: Obj = {"source": {"persistentVolumeClaimName": name}}
    if seen.snapshot_class:
        spec["volumeSnapshotClassName"] = seen.snapshot_class
    annotations = {api.LAST_USE_TIME: rfc3339_nano(seen.now)}
    mode = (claim.get("spec") or {}).get("volumeMode")
    if mode:
        annotations[api.SOURCE_VOLUME_MODE] = str(mode)
    plan.create_snapshot = {
        "apiVersion": f"{api.SNAPSHOT_API_GROUP}/v1", "kind": api.VOLUME_SNAPSHOT_KIND,
        "metadata": {"name": name, "namespace": cmeta.get("namespace"),
                     "labels": {**labels, api.APP_LABEL: api.APP_LABEL_VALUE,
                                api.COMPONENT_LABEL: ""},
                     "annotations": annotations},
        "spec": spec}


def _garbage(claims: Sequence[Mapping[str, Any]], *, keep_count: int,
             touched: tuple[str, dict[str, str], dict[str, str]] | None) -> list[str]:
    """The claims beyond the ``keep_count`` most recently used (upstream's
    ``garbageCollectPVCs``), the one touched now counted as used now."""
    def last_use(claim: Mapping[str, Any]) -> str:
        cmeta = claim.get("metadata") or {}
        if touched is not None and cmeta.get("name") == touched[0]:
            return touched[2][api.LAST_USE_TIME]
        return str((cmeta.get("annotations") or {}).get(api.LAST_USE_TIME) or "")

    if len(claims) <= keep_count:
        return []
    ordered = sorted(claims, key=last_use, reverse=True)
    return [str((c.get("metadata") or {}).get("name")) for c in ordered[keep_count:]]


def _data_source(seen: Observed, cron: Mapping[str, Any], status: Obj, plan: Plan) -> None:
    """Upstream's ``updateDataSource``: made when missing; one labelled for another cron
    (or for none) is left alone; ours names the last imported claim."""
    meta = cron.get("metadata") or {}
    managed = str(_spec(cron).get("managedDataSource") or "")
    source = ({seen.format: dict(status["lastImportedPVC"])} if status.get("lastImportedPVC")
              else None)
    if seen.data_source is None:
        plan.create_data_source = {
            "apiVersion": api.API_VERSION, "kind": "DataSource",
            "metadata": {"name": managed, "namespace": meta.get("namespace"),
                         "labels": managed_labels(cron)},
            "spec": {"source": source or {}}}
        return
    labels = (seen.data_source.get("metadata") or {}).get("labels") or {}
    if labels.get(api.CRON_LABEL) != meta.get("name"):
        return
    current = (seen.data_source.get("spec") or {}).get("source") or {}
    if source is not None and current != source:
        plan.data_source_source = source


def labelled_for_other(data_source: Mapping[str, Any] | None,
                       cron: Mapping[str, Any]) -> str | None:
    """The other cron a DataSource is labelled for (None: none, or this one)."""
    label = (((data_source or {}).get("metadata") or {}).get("labels") or {}).get(
        api.CRON_LABEL)
    if not label or label == (cron.get("metadata") or {}).get("name"):
        return None
    return str(label)


def managed_by_other(data_source: Mapping[str, Any] | None,
                     other: Mapping[str, Any] | None) -> bool:
    """Upstream's ``shouldReconcileCron``: ``other`` (the cron the DataSource is labelled
    for, :func:`labelled_for_other`) manages it, so this cron does nothing."""
    return data_source is not None and other is not None and \
        _spec(other).get("managedDataSource") == (data_source.get("metadata") or {}).get("name")
