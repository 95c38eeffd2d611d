"""DataImportCron decisions (pure), as upstream CDI c07cdb6fb's controller makes them:
polling, the import per digest, the DataSource, the conditions, garbage collection."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from cdi import importcron
from cdi.importcron import Observed, Poll, decide

NOW = dt.datetime(2026, 12, 5, 12, 0, 0, tzinfo=dt.UTC)
D1 = "sha256:" + "a" * 64
D2 = "sha256:" + "b" * 64
A = "cdi.kubevirt.io/storage.import."
LABEL = "cdi.kubevirt.io/dataImportCron"


def cron(*, annotations: dict[str, str] | None = None, status: dict[str, Any] | None = None,
         **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataImportCron",
            "metadata": {"name": "fedora-cron", "namespace": "golden",
                         "annotations": annotations or {}},
            "spec": {"schedule": "0 */12 * * *", "managedDataSource": "fedora",
                     "template": {"spec": {"source": {"registry": {
                         "url": "docker://quay.io/containerdisks/fedora:41",
                         "secretRef": "pull"}},
                         "storage": {"resources": {"requests": {"storage": "5Gi"}}}}},
                     **spec},
            "status": status or {}}


def dv(name: str, phase: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "golden", "labels": {LABEL: "fedora-cron"}},
            "status": {"phase": phase, **status}}


def claim(name: str, last_use: str | None = None, phase: str = "Bound") -> dict[str, Any]:
    ann = {A + "lastUseTime": last_use} if last_use else {}
    return {"metadata": {"name": name, "namespace": "golden",
                         "labels": {LABEL: "fedora-cron"}, "annotations": ann},
            "status": {"phase": phase}}


def cond(plan: importcron.Plan, ctype: str) -> tuple[str, str, str]:
    assert plan.status is not None
    c = next(c for c in plan.status["conditions"] if c["type"] == ctype)
    return c["status"], c["reason"], c["message"]


def test_a_new_cron_polls_at_once_and_imports_the_digest() -> None:
    new = cron()
    assert importcron.should_poll(new, NOW)
    plan = decide(Observed(cron=new, now=NOW, poll=Poll(digest=D1)))
    assert plan.annotations == {A + "sourceDesiredDigest": D1,
                                A + "lastCronTime": "2026-12-05T12:00:00Z",
                                A + "nextCronTime": "2026-12-06T00:00:00Z"}
    made = plan.create_dv
    assert made is not None
    assert made["metadata"]["name"] == "fedora-aaaaaaaaaaaa"
    assert made["metadata"]["namespace"] == "golden"
    assert made["spec"]["source"]["registry"] == {
        "url": f"docker://quay.io/containerdisks/fedora@{D1}", "secretRef": "pull"}
    assert made["metadata"]["labels"] == {LABEL: "fedora-cron"}
    assert made["metadata"]["annotations"][
        "cdi.kubevirt.io/storage.bind.immediate.requested"] == "true"
    assert made["metadata"]["annotations"][A + "lastUseTime"] == "2026-12-05T12:00:00Z"
    assert plan.status is not None
    assert plan.status["currentImports"] == [{"DataVolumeName": "fedora-aaaaaaaaaaaa",
                                              "Digest": D1}]
    assert plan.status["lastExecutionTimestamp"] == "2026-12-05T12:00:00Z"
    assert cond(plan, "UpToDate") == ("False", "Outdated",
                                      "Source digest updated since last import")
    assert cond(plan, "Progressing") == ("False", "NoImport", "No current import")
    assert plan.create_data_source == {
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataSource",
        "metadata": {"name": "fedora", "namespace": "golden", "labels": {LABEL: "fedora-cron"}},
        "spec": {"source": {}}}


def test_not_due_no_poll_and_the_next_time_kept() -> None:
    waiting = cron(annotations={A + "nextCronTime": "2026-12-06T00:00:00Z"})
    assert not importcron.should_poll(waiting, NOW)
    assert importcron.should_poll(waiting, NOW + dt.timedelta(hours=12))
    plan = decide(Observed(cron=waiting, now=NOW))
    assert A + "nextCronTime" not in plan.annotations
    assert cond(plan, "UpToDate") == ("False", "NoDigest", "No source digest")
    # a time in the past (what the e2e writes) polls at the next reconcile
    assert importcron.should_poll(cron(annotations={A + "nextCronTime": "2020-01-01T00:00:00Z"}),
                                  NOW)
    # a next time later than the schedule says is put back on the schedule
    late = decide(Observed(cron=cron(annotations={A + "nextCronTime": "2027-06-01T00:00:00Z"}),
                           now=NOW))
    assert late.annotations[A + "nextCronTime"] == "2026-12-06T00:00:00Z"


def test_no_schedule_no_poll() -> None:
    assert not importcron.should_poll(cron(schedule=""), NOW)
    plan = decide(Observed(cron=cron(schedule=""), now=NOW))
    assert plan.annotations == {} and plan.create_dv is None


IMPORTING = {"currentImports": [{"DataVolumeName": "fedora-aaaaaaaaaaaa", "Digest": D1}]}


@pytest.mark.parametrize(("phase", "progressing"), [
    ("ImportScheduled", ("False", "ImportScheduled", "Import is scheduled")),
    ("ImportInProgress", ("True", "ImportProgressing", "Import is progressing")),
    ("Pending", ("False", "Pending", "Import DataVolume phase Pending")),
])
def test_an_import_under_way(phase: str, progressing: tuple[str, str, str]) -> None:
    running = cron(annotations={A + "sourceDesiredDigest": D1,
                                A + "nextCronTime": "2026-12-06T00:00:00Z"}, status=IMPORTING)
    plan = decide(Observed(cron=running, now=NOW, dv=dv("fedora-aaaaaaaaaaaa", phase),
                           data_source={"metadata": {"name": "fedora",
                                                     "labels": {LABEL: "fedora-cron"}},
                                        "spec": {"source": {}}}))
    assert cond(plan, "Progressing") == progressing
    assert cond(plan, "UpToDate") == ("False", "ImportProgressing", "Import is progressing")
    assert plan.create_dv is None and plan.collect == [] and plan.data_source_source is None


def test_success_points_the_data_source_and_collects_the_oldest() -> None:
    done = cron(annotations={A + "sourceDesiredDigest": D1,
                             A + "nextCronTime": "2026-12-06T00:00:00Z",
                             A + "lastCronTime": "2026-12-05T11:00:00Z"},
                status=IMPORTING, importsToKeep=2)
    claims = [claim("fedora-aaaaaaaaaaaa"),
              claim("fedora-000000000001", "2026-11-01T00:00:00.000000000Z"),
              claim("fedora-000000000002", "2026-11-02T00:00:00.000000000Z"),
              claim("fedora-000000000003", "2026-11-03T00:00:00.000000000Z")]
    plan = decide(Observed(
        cron=done, now=NOW, dv=dv("fedora-aaaaaaaaaaaa", "Succeeded"), pvc=claims[0],
        claims=claims, data_source={"metadata": {"name": "fedora",
                                                 "labels": {LABEL: "fedora-cron"}},
                                    "spec": {"source": {}}}))
    assert plan.status is not None
    assert plan.status["lastImportedPVC"] == {"namespace": "golden",
                                              "name": "fedora-aaaaaaaaaaaa"}
    assert plan.status["lastImportTimestamp"] == "2026-12-05T12:00:00Z"
    assert plan.status["lastExecutionTimestamp"] == "2026-12-05T11:00:00Z"
    assert plan.status["sourceFormat"] == "pvc"
    assert cond(plan, "UpToDate") == ("True", "UpToDate", "Latest import is up to date")
    assert cond(plan, "Progressing") == ("False", "NoImport", "No current import")
    assert plan.data_source_source == {"pvc": {"namespace": "golden",
                                               "name": "fedora-aaaaaaaaaaaa"}}
    assert plan.touch_claim is not None and plan.touch_claim[0] == "fedora-aaaaaaaaaaaa"
    # the new import counts as used now: the two oldest go
    assert plan.collect == ["fedora-000000000002", "fedora-000000000001"]
    never = decide(Observed(cron={**done, "spec": {**done["spec"], "garbageCollect": "Never"}},
                            now=NOW, dv=dv("fedora-aaaaaaaaaaaa", "Succeeded"), pvc=claims[0],
                            claims=claims))
    assert never.collect == []


def test_a_new_digest_after_success_imports_again() -> None:
    done = cron(annotations={A + "sourceDesiredDigest": D1,
                             A + "nextCronTime": "2026-12-05T11:59:00Z"}, status=IMPORTING)
    plan = decide(Observed(cron=done, now=NOW, dv=dv("fedora-aaaaaaaaaaaa", "Succeeded"),
                           pvc=claim("fedora-aaaaaaaaaaaa"), poll=Poll(digest=D2)))
    assert plan.create_dv is not None
    assert plan.create_dv["metadata"]["name"] == "fedora-bbbbbbbbbbbb"
    assert plan.status is not None
    assert plan.status["currentImports"] == [{"DataVolumeName": "fedora-bbbbbbbbbbbb",
                                              "Digest": D2}]
    assert cond(plan, "UpToDate")[1] == "Outdated"


def test_an_import_made_before_is_reused_not_imported_again() -> None:
    plan = decide(Observed(cron=cron(), now=NOW, poll=Poll(digest=D1),
                           existing=claim("fedora-aaaaaaaaaaaa")))
    assert plan.create_dv is None
    assert plan.touch_claim is not None and plan.touch_claim[0] == "fedora-aaaaaaaaaaaa"


def test_a_failed_import_gives_way_to_a_new_digest() -> None:
    """As upstream: an import whose Running condition says Error is deleted when a new
    digest comes (the new one is imported instead); with the same digest it is left to
    the DataVolume's own retries."""
    failing = cron(annotations={A + "sourceDesiredDigest": D1,
                                A + "nextCronTime": "2026-12-06T00:00:00Z"}, status=IMPORTING)
    broken = dv("fedora-aaaaaaaaaaaa", "ImportInProgress", conditions=[
        {"type": "Running", "status": "False", "reason": "Error", "message": "boom"}])
    same = decide(Observed(cron=failing, now=NOW, dv=broken))
    assert same.delete_dv is None and same.create_dv is None
    newer = decide(Observed(cron=failing, now=NOW, dv=broken, poll=Poll(digest=D2)))
    assert newer.delete_dv == "fedora-aaaaaaaaaaaa"
    assert newer.create_dv is not None
    assert newer.create_dv["metadata"]["name"] == "fedora-bbbbbbbbbbbb"
    healthy = decide(Observed(cron=failing, now=NOW, dv=dv("fedora-aaaaaaaaaaaa",
                                                           "ImportInProgress"),
                              poll=Poll(digest=D2)))
    assert healthy.delete_dv is None and healthy.create_dv is None  # waits for it


def test_a_failed_poll_is_an_event_and_tried_again_soon() -> None:
    plan = decide(Observed(cron=cron(), now=NOW, poll=Poll(error="polling x: refused")))
    assert plan.events == [("Warning", "DigestPollFailed", "polling x: refused")]
    assert plan.annotations == {A + "nextCronTime": "2026-12-05T12:00:30Z"}  # no lastCronTime
    assert plan.create_dv is None


def test_a_data_source_of_another_cron_or_none_is_left_alone() -> None:
    mine = cron(annotations={A + "sourceDesiredDigest": D1}, status=IMPORTING)
    for labels in ({LABEL: "other"}, {}):
        plan = decide(Observed(cron=mine, now=NOW, dv=dv("fedora-aaaaaaaaaaaa", "Succeeded"),
                               pvc=claim("fedora-aaaaaaaaaaaa"),
                               data_source={"metadata": {"name": "fedora", "labels": labels},
                                            "spec": {"source": {"pvc": {"name": "x"}}}}))
        assert plan.data_source_source is None and plan.create_data_source is None
    other = cron()
    other["metadata"]["name"] = "other"
    ds = {"metadata": {"name": "fedora", "labels": {LABEL: "other"}}}
    assert importcron.labelled_for_other(ds, cron()) == "other"
    assert importcron.labelled_for_other(ds, other) is None
    assert importcron.managed_by_other(ds, other) is True
    assert importcron.managed_by_other(ds, None) is False


def test_retention_none_labels_for_cleanup() -> None:
    plan = decide(Observed(cron=cron(retentionPolicy="None"), now=NOW, poll=Poll(digest=D1)))
    assert plan.create_dv is not None
    assert plan.create_dv["metadata"]["labels"] == {
        LABEL: "fedora-cron", "cdi.kubevirt.io/dataImportCron.cleanup": "true"}


@pytest.mark.parametrize(("schedule", "after", "expected"), [
    ("0 */12 * * *", NOW, "2026-12-06T00:00:00Z"),
    ("30 1 * * 1", NOW, "2026-12-07T01:30:00Z"),
    ("@daily", NOW, "2026-12-06T00:00:00Z"),
    ("@hourly", NOW, "2026-12-05T13:00:00Z"),
    ("@every 1h30m", NOW, "2026-12-05T13:30:00Z"),
])
def test_next_time(schedule: str, after: dt.datetime, expected: str) -> None:
    assert importcron.rfc3339(importcron.next_time(schedule, after)) == expected


@pytest.mark.parametrize("schedule", ["61 * * * *", "* * * *", "0 0 * * * *", "bad",
                                      "@every 0s", "@fortnightly", "TZ=UTC 0 0 * * *"])
def test_bad_schedules(schedule: str) -> None:
    assert not importcron.valid_schedule(schedule)


@pytest.mark.parametrize(("digest", "name"), [
    (D1, "fedora-aaaaaaaaaaaa"),
    ("uid:0123456789abcdef", "fedora-0123456789ab"),
])
def test_dv_names(digest: str, name: str) -> None:
    assert importcron.dv_name("fedora", digest) == name


@pytest.mark.parametrize(("digest", "error"), [("md5:abc", "Digest has no supported prefix"),
                                               ("sha256:abc", "Digest is too short")])
def test_bad_digests(digest: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        importcron.dv_name("fedora", digest)


def test_resource_name_shortens_as_openshift_does() -> None:
    assert importcron.resource_name("a" * 250, "bcdef") == "a" * 238 + "-" + \
        importcron._fnv32a("a" * 250) + "-bcdef"
    assert len(importcron.resource_name("a" * 250, "bcdef")) == 253
    assert importcron._fnv32a("") == "811c9dc5"  # FNV-1a offset basis


@pytest.mark.parametrize(("url", "expected"), [
    ("docker://quay.io/containerdisks/fedora:41", "docker://quay.io/containerdisks/fedora"),
    ("docker://127.0.0.1:5000/golden/x:v1", "docker://127.0.0.1:5000/golden/x"),
    ("docker://127.0.0.1:5000/golden/x", "docker://127.0.0.1:5000/golden/x"),
    (f"docker://r/x@{D1}", "docker://r/x"),
])
def test_untagged(url: str, expected: str) -> None:
    assert importcron.untagged(url) == expected


SNAP_DS = {"metadata": {"name": "fedora", "labels": {LABEL: "fedora-cron"}},
           "spec": {"source": {}}}


def snapshot(name: str, ready: bool, last_use: str | None = None) -> dict[str, Any]:
    ann = {A + "lastUseTime": last_use} if last_use else {}
    return {"kind": "VolumeSnapshot",
            "metadata": {"name": name, "namespace": "golden", "annotations": ann,
                         "labels": {LABEL: "fedora-cron"}},
            "status": {"readyToUse": ready}}


def test_snapshot_format_snapshots_the_import_then_drops_the_claim() -> None:
    """StorageProfile dataImportCronSourceFormat: snapshot (upstream's handleSnapshot):
    the succeeded import is snapshotted under its name; once the snapshot is ready the
    DataVolume and claim go and the DataSource names the snapshot."""
    done = cron(annotations={A + "sourceDesiredDigest": D1,
                             A + "nextCronTime": "2026-12-06T00:00:00Z"}, status=IMPORTING)
    first = decide(Observed(cron=done, now=NOW, dv=dv("fedora-aaaaaaaaaaaa", "Succeeded"),
                            pvc={**claim("fedora-aaaaaaaaaaaa"),
                                 "spec": {"volumeMode": "Filesystem"}},
                            data_source=SNAP_DS, format="snapshot",
                            snapshot_class="local-snapshots"))
    made = first.create_snapshot
    assert made is not None
    assert made["metadata"]["labels"] == {LABEL: "fedora-cron",
                                          "app": "containerized-data-importer",
                                          "cdi.kubevirt.io": ""}
    assert made["metadata"]["annotations"][A + "sourceVolumeMode"] == "Filesystem"
    assert made["spec"] == {"source": {"persistentVolumeClaimName": "fedora-aaaaaaaaaaaa"},
                            "volumeSnapshotClassName": "local-snapshots"}
    assert (made["metadata"]["name"], made["kind"]) == ("fedora-aaaaaaaaaaaa", "VolumeSnapshot")
    assert first.delete_import is None
    assert first.data_source_source == {"snapshot": {"namespace": "golden",
                                                     "name": "fedora-aaaaaaaaaaaa"}}
    assert first.status is not None and first.status["sourceFormat"] == "snapshot"
    taking = decide(Observed(cron=done, now=NOW, dv=dv("fedora-aaaaaaaaaaaa", "Succeeded"),
                             pvc=claim("fedora-aaaaaaaaaaaa"), data_source=SNAP_DS,
                             format="snapshot",
                             snapshot=snapshot("fedora-aaaaaaaaaaaa", ready=False)))
    assert taking.create_snapshot is None and taking.delete_import is None
    assert cond(taking, "UpToDate") == ("False", "ImportProgressing",
                                        "Snapshot of imported data is progressing")
    ready = snapshot("fedora-aaaaaaaaaaaa", ready=True)
    dropped = decide(Observed(cron=done, now=NOW, dv=dv("fedora-aaaaaaaaaaaa", "Succeeded"),
                              pvc=claim("fedora-aaaaaaaaaaaa"), data_source=SNAP_DS,
                              format="snapshot", snapshot=ready))
    assert dropped.delete_import == "fedora-aaaaaaaaaaaa"
    # then only the snapshot is left: it is the import, kept and collected by lastUseTime
    later = decide(Observed(
        cron=done, now=NOW, data_source=SNAP_DS, format="snapshot", snapshot=ready,
        snapshots=[ready, snapshot("fedora-000000000001", True, "2026-11-01T00:00:00Z"),
                   snapshot("fedora-000000000002", True, "2026-11-02T00:00:00Z"),
                   snapshot("fedora-000000000003", True, "2026-11-03T00:00:00Z")]))
    assert cond(later, "UpToDate") == ("True", "UpToDate", "Latest import is up to date")
    assert later.touch_snapshot is not None and later.touch_snapshot[0] == "fedora-aaaaaaaaaaaa"
    assert later.collect_snapshots == ["fedora-000000000001"]


def test_a_snapshot_while_the_format_is_pvc_is_deleted() -> None:
    done = cron(annotations={A + "sourceDesiredDigest": D1,
                             A + "nextCronTime": "2026-12-06T00:00:00Z"}, status=IMPORTING)
    plan = decide(Observed(cron=done, now=NOW,
                           snapshot=snapshot("fedora-aaaaaaaaaaaa", ready=True)))
    assert plan.delete_snapshot == "fedora-aaaaaaaaaaaa"


def test_times_as_go_prints_them() -> None:
    assert importcron.rfc3339_nano(NOW) == "2026-12-05T12:00:00Z"
    assert importcron.rfc3339_nano(NOW.replace(microsecond=120000)) == \
        "2026-12-05T12:00:00.12Z"


def test_the_crons_kubevirt_labels_go_onto_what_it_makes() -> None:
    labelled = cron()
    labelled["metadata"]["labels"] = {
        "instancetype.kubevirt.io/default-instancetype": "u1.medium",
        "kubevirt.io/dynamic-credentials-support": "true", "team": "blue"}
    plan = decide(Observed(cron=labelled, now=NOW, poll=Poll(digest=D1)))
    expected = {LABEL: "fedora-cron",
                "instancetype.kubevirt.io/default-instancetype": "u1.medium",
                "kubevirt.io/dynamic-credentials-support": "true"}
    assert plan.create_dv is not None and plan.create_dv["metadata"]["labels"] == expected
    assert plan.create_data_source is not None
    assert plan.create_data_source["metadata"]["labels"] == expected
