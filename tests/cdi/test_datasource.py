"""A DataSource's Ready condition follows its claim (pure)."""

from __future__ import annotations

from typing import Any

from cdi import datasource


def ds(source: dict[str, Any], name: str = "fedora", ns: str = "g") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"source": source}}


def world(**objs: Any) -> datasource.Lookup:
    return lambda kind, ns, name: objs.get(f"{kind}:{ns}/{name}")


BOUND = {"status": {"phase": "Bound"}}


def test_ready_follows_the_claim_and_its_datavolume() -> None:
    d = ds({"pvc": {"name": "golden"}})
    assert datasource.ready(data_source=d, lookup=world())[:2] == ("False", "NotFound")
    assert datasource.ready(data_source=d, lookup=world(
        **{"PersistentVolumeClaim:g/golden": {"status": {"phase": "Pending"}}}))[0] == "False"
    assert datasource.ready(data_source=d, lookup=world(
        **{"PersistentVolumeClaim:g/golden": BOUND}))[0] == "True"
    assert datasource.ready(data_source=d, lookup=world(
        **{"PersistentVolumeClaim:g/golden": BOUND,
           "DataVolume:g/golden": {"status": {"phase": "ImportInProgress"}}}))[:2] == (
        "False", "ImportInProgress")


def test_one_level_of_data_source_only() -> None:
    lookup = world(**{"DataSource:g/fedora": ds({"pvc": {"name": "golden"}}),
                      "PersistentVolumeClaim:g/golden": BOUND,
                      "DataSource:g/latest": ds({"dataSource": {"name": "fedora"}}, "latest")})
    assert datasource.ready(data_source=ds({"dataSource": {"name": "fedora"}}, "latest"),
                            lookup=lookup)[0] == "True"
    assert datasource.ready(data_source=ds({"dataSource": {"name": "latest"}}, "top"),
                            lookup=lookup)[:2] == ("False", "NotFound")


def test_status_patch_only_on_change() -> None:
    d = ds({"pvc": {"name": "golden"}})
    new = datasource.status_patch(data_source=d, condition=("True", "Ready", ""), now="t1")
    assert new is not None and new["conditions"][0]["status"] == "True"
    assert new["source"] == {"pvc": {"name": "golden"}}
    d["status"] = new
    assert datasource.status_patch(data_source=d, condition=("True", "Ready", ""),
                                   now="t2") is None
    flipped = datasource.status_patch(data_source=d, condition=("False", "NotFound", "x"),
                                      now="t3")
    assert flipped is not None and flipped["conditions"][0]["lastTransitionTime"] == "t3"


def test_what_a_data_source_refers_to() -> None:
    """The key the operator indexes DataSources by: a DataSource named wins over a claim
    (as in ``ready``), the DataSource's own namespace is the default."""
    assert datasource.refers_to(ds({"pvc": {"name": "golden"}})) == (
        "PersistentVolumeClaim", "g", "golden")
    assert datasource.refers_to(ds({"pvc": {"name": "golden", "namespace": "os"}})) == (
        "PersistentVolumeClaim", "os", "golden")
    assert datasource.refers_to(ds({"pvc": {"name": "golden"},
                                    "dataSource": {"name": "fedora", "namespace": "os"}})
                                ) == ("DataSource", "os", "fedora")
    for source in ({}, {"pvc": {}}, {"pvc": "golden"}, {"dataSource": {"name": ""}}):
        assert datasource.refers_to(ds(source)) is None
