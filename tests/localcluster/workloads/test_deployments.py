"""Table tests of the Deployment → ReplicaSet and ReplicaSet → Pod plans (pure)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from localcluster.workloads import deployments, replicasets, shared
from localcluster.workloads.deployments import REVISION

NOW = "2026-01-01T00:00:00Z"
TEMPLATE = {"metadata": {"labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": "rootdisk/operator:v2"}]}}
OLD_TEMPLATE = {"metadata": {"labels": {"app": "x"}},
                "spec": {"containers": [{"name": "c", "image": "rootdisk/operator:v1"}]}}


def deployment(replicas: int = 4, template: dict | None = None, **spec: Any) -> dict:
    return {"metadata": {"name": "d", "namespace": "ns", "uid": "D", "generation": 3},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "x"}},
                     "template": copy.deepcopy(template or TEMPLATE), **spec}}


def rs_for(template: dict, *, revision: int, replicas: int, live: int | None = None,
           available: int | None = None, owner: str = "D") -> dict:
    """A ReplicaSet as the controller made it, with the status its pods give it."""
    made = deployments.new_replicaset(deployment(template=template), replicas=replicas,
                                      revision=revision, max_surge=1)
    made["metadata"]["ownerReferences"][0]["uid"] = owner
    made["metadata"]["generation"] = 1
    live = replicas if live is None else live
    made["status"] = {"replicas": live, "readyReplicas": available if available is not None
                      else live, "availableReplicas": available if available is not None
                      else live, "observedGeneration": 1}
    return made


def plan(d: dict, rss: list[dict]) -> deployments.DeploymentPlan:
    return deployments.deployment_plan(deployment=d, replicasets=rss, now=NOW)


def conditions(p: deployments.DeploymentPlan) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in p.status["conditions"]}


def test_first_replica_set_carries_hash_selector_revision_and_owner() -> None:
    p = plan(deployment(4), [])
    rs = p.create
    assert rs is not None and rs["spec"]["replicas"] == 4
    h = rs["metadata"]["labels"][shared.TEMPLATE_HASH]
    assert rs["metadata"]["name"] == f"d-{h}"
    assert rs["spec"]["selector"]["matchLabels"] == {"app": "x", shared.TEMPLATE_HASH: h}
    assert rs["spec"]["template"]["metadata"]["labels"] == {"app": "x",
                                                            shared.TEMPLATE_HASH: h}
    assert rs["spec"]["template"]["spec"] == TEMPLATE["spec"]
    assert rs["metadata"]["annotations"][REVISION] == "1" and p.revision == "1"
    assert rs["metadata"]["ownerReferences"][0]["uid"] == "D"
    assert conditions(p)["Progressing"] == ("True", "NewReplicaSetCreated")


def test_same_template_same_replica_set_name() -> None:
    assert plan(deployment(), []).create["metadata"]["name"] == \
        plan(deployment(), []).create["metadata"]["name"]
    assert plan(deployment(), []).create["metadata"]["name"] != \
        plan(deployment(template=OLD_TEMPLATE), []).create["metadata"]["name"]


def test_rollout_starts_within_surge_and_unavailability() -> None:
    # 4 replicas, 25 %: one pod over, one pod under at most.
    p = plan(deployment(4), [rs_for(OLD_TEMPLATE, revision=1, replicas=4)])
    assert p.create is not None and p.create["spec"]["replicas"] == 1
    assert p.create["metadata"]["annotations"][REVISION] == "2"
    old_name = rs_for(OLD_TEMPLATE, revision=1, replicas=4)["metadata"]["name"]
    assert p.scale == {old_name: 3}


def test_rollout_waits_for_new_pods_to_become_available() -> None:
    old = rs_for(OLD_TEMPLATE, revision=1, replicas=3)
    new = rs_for(TEMPLATE, revision=2, replicas=1, live=1, available=0)
    p = plan(deployment(4), [old, new])
    # 1 + 3 = 4 pods: one more may be made; none old may go, the new one is not available.
    assert p.create is None
    assert p.scale == {new["metadata"]["name"]: 2}


def test_rollout_moves_on_as_new_pods_become_available() -> None:
    old = rs_for(OLD_TEMPLATE, revision=1, replicas=3)
    new = rs_for(TEMPLATE, revision=2, replicas=1)
    p = plan(deployment(4), [old, new])
    assert p.scale == {new["metadata"]["name"]: 2, old["metadata"]["name"]: 2}


def test_unavailable_old_pods_go_first() -> None:
    old = rs_for(OLD_TEMPLATE, revision=1, replicas=4, available=1)
    new = rs_for(TEMPLATE, revision=2, replicas=1, live=1, available=1)
    p = plan(deployment(4, strategy={"rollingUpdate": {"maxSurge": 0,
                                                       "maxUnavailable": 1}}), [old, new])
    # 5 pods, at least 3 to keep: 2 may go, and they are taken from the 3 unavailable old
    # pods (nothing available is touched: only 2 pods are available, fewer than 3).
    assert p.scale == {old["metadata"]["name"]: 2}


def test_complete_rollout_reports_new_replica_set_available() -> None:
    old = rs_for(OLD_TEMPLATE, revision=1, replicas=0)
    new = rs_for(TEMPLATE, revision=2, replicas=4)
    p = plan(deployment(4), [old, new])
    assert p.create is None and p.scale == {} and p.delete == []
    assert conditions(p) == {"Available": ("True", "MinimumReplicasAvailable"),
                             "Progressing": ("True", "NewReplicaSetAvailable")}
    assert p.status["updatedReplicas"] == 4 and p.status["replicas"] == 4
    assert p.status["observedGeneration"] == 3 and p.revision == "2"


def test_scaling_down_without_template_change() -> None:
    new = rs_for(TEMPLATE, revision=1, replicas=4)
    assert plan(deployment(2), [new]).scale == {new["metadata"]["name"]: 2}


def test_recreate_empties_old_replica_sets_before_the_new_grows() -> None:
    old = rs_for(OLD_TEMPLATE, revision=1, replicas=2)
    p = plan(deployment(2, strategy={"type": "Recreate"}), [old])
    assert p.create is not None and p.create["spec"]["replicas"] == 0
    assert p.scale == {old["metadata"]["name"]: 0}
    # Old pods still terminating: the new one waits.
    new = rs_for(TEMPLATE, revision=2, replicas=0)
    draining = rs_for(OLD_TEMPLATE, revision=1, replicas=0, live=1)
    assert plan(deployment(2, strategy={"type": "Recreate"}), [draining, new]).scale == {}
    gone = rs_for(OLD_TEMPLATE, revision=1, replicas=0, live=0)
    assert plan(deployment(2, strategy={"type": "Recreate"}), [gone, new]).scale == {
        new["metadata"]["name"]: 2}


def test_undo_brings_an_old_replica_set_back_with_a_new_revision() -> None:
    rev1 = rs_for(OLD_TEMPLATE, revision=1, replicas=0)
    rev2 = rs_for(TEMPLATE, revision=2, replicas=4)
    p = plan(deployment(4, template=OLD_TEMPLATE), [rev1, rev2])
    assert p.create is None
    assert p.annotate[rev1["metadata"]["name"]][REVISION] == "3" and p.revision == "3"
    assert p.scale[rev1["metadata"]["name"]] == 1


def test_revision_history_limit_deletes_the_oldest_idle_replica_sets() -> None:
    idle = [rs_for({**TEMPLATE, "spec": {"containers": [{"name": "c", "image": f"i{n}"}]}},
                   revision=n, replicas=0, live=0) for n in (1, 2, 3)]
    new = rs_for(TEMPLATE, revision=4, replicas=4)
    p = plan(deployment(4, revisionHistoryLimit=1), [*idle, new])
    assert p.delete == [idle[0]["metadata"]["name"], idle[1]["metadata"]["name"]]


def test_paused_deployment_does_not_roll_out() -> None:
    old = rs_for(OLD_TEMPLATE, revision=1, replicas=4)
    p = plan(deployment(4, paused=True), [old])
    assert p.create is None and p.scale == {}
    assert conditions(p)["Progressing"] == ("Unknown", "DeploymentPaused")


def test_other_owners_replica_sets_are_not_ours() -> None:
    foreign = rs_for(TEMPLATE, revision=7, replicas=4, owner="OTHER")
    p = plan(deployment(4), [foreign])
    assert p.create is not None and p.scale == {}


@pytest.mark.parametrize(("rolling", "replicas", "expected"), [
    ({}, 4, (1, 1)),
    ({}, 10, (3, 2)),  # surge rounds up, unavailability down
    ({"maxSurge": 0, "maxUnavailable": 0}, 4, (0, 1)),
    ({"maxSurge": "50%", "maxUnavailable": 2}, 3, (2, 2)),
    ({"maxUnavailable": 10}, 3, (1, 3)),
])
def test_fenceposts(rolling: dict, replicas: int, expected: tuple[int, int]) -> None:
    assert deployments.fenceposts({"strategy": {"rollingUpdate": rolling}}, replicas) == \
        expected


@pytest.mark.parametrize("bad", ["abc", "10", "-5%", True])
def test_bad_surge_names_the_field(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"spec\.strategy\.rollingUpdate\.maxSurge"):
        deployments.fenceposts({"strategy": {"rollingUpdate": {"maxSurge": bad}}}, 4)


# -- ReplicaSet → pods -------------------------------------------------------------------


def replicaset(replicas: int = 2) -> dict:
    return {"metadata": {"name": "d-abc", "namespace": "ns", "uid": "R", "generation": 2},
            "spec": {"replicas": replicas,
                     "template": {"metadata": {"labels": {"app": "x", "h": "abc"}},
                                  "spec": TEMPLATE["spec"]}}}


def pod(name: str, *, owner: str = "R", phase: str = "Running", ready: bool = True,
        deleting: bool = False) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "labels": {"app": "x", "h": "abc"},
                            "ownerReferences": [{"uid": owner, "controller": True}]}
    if deleting:
        meta["deletionTimestamp"] = NOW
    return {"metadata": meta, "spec": {}, "status": {"phase": phase, "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}}


@pytest.mark.parametrize(("pods", "create", "delete"), [
    ([], 2, []),
    ([pod("a"), pod("b")], 0, []),
    ([pod("a"), pod("b"), pod("c", ready=False)], 0, ["c"]),  # not-ready goes first
    ([pod("a"), pod("b", phase="Failed")], 1, ["b"]),  # replaced
    ([pod("a"), pod("b", deleting=True)], 1, []),  # a deleting pod is gone already
    ([pod("a", owner="OTHER")], 2, []),  # not ours
])
def test_replicaset_plan(pods: list, create: int, delete: list) -> None:
    p = replicasets.replicaset_plan(replicaset=replicaset(2), pods=pods)
    assert (len(p.create), sorted(p.delete)) == (create, delete)


def test_replicaset_pods_and_status() -> None:
    p = replicasets.replicaset_plan(replicaset=replicaset(3),
                                    pods=[pod("a"), pod("b", ready=False)])
    made = p.create[0]
    assert made["metadata"]["generateName"] == "d-abc-"
    assert made["metadata"]["labels"] == {"app": "x", "h": "abc"}
    assert made["metadata"]["ownerReferences"][0] == {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "d-abc", "uid": "R",
        "controller": True, "blockOwnerDeletion": True}
    assert p.status == {"observedGeneration": 2, "replicas": 2, "fullyLabeledReplicas": 2,
                        "readyReplicas": 1, "availableReplicas": 1}


def test_a_template_sent_back_by_a_go_client_is_the_same_template() -> None:
    # kubectl rollout undo writes the old ReplicaSet's template back with Go's zero
    # values (creationTimestamp: null, resources: {}): it must find that ReplicaSet.
    rev1 = rs_for(OLD_TEMPLATE, revision=1, replicas=0)
    rev2 = rs_for(TEMPLATE, revision=2, replicas=4)
    echoed = copy.deepcopy(OLD_TEMPLATE)
    echoed["metadata"]["creationTimestamp"] = None
    echoed["spec"]["containers"][0]["resources"] = {}
    p = plan(deployment(4, template=echoed), [rev1, rev2])
    assert p.create is None and rev1["metadata"]["name"] in p.annotate
