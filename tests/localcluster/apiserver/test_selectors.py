"""Label and field selectors: grammar, matching and Kubernetes-style errors."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster.apiserver.selectors import (
    SelectorError,
    field_value,
    label_key_errors,
    label_selector_from_dict,
    parse_field_selector,
    parse_label_selector,
    selectable_fields,
)

LABELS = {"app": "web", "tier": "front", "example.com/team": "a", "n": "5", "empty": ""}

LABEL_CASES = [
    ("", True),
    ("   ", True),
    ("app=web", True),
    ("app==web", True),
    ("app = web", True),
    ("app=db", False),
    ("app!=db", True),
    ("app!=web", False),
    ("missing!=x", True),  # != matches when the key is absent
    ("missing=x", False),
    ("app in (web,db)", True),
    ("app in (db, cache)", False),
    ("app notin (db,cache)", True),
    ("missing notin (a)", True),
    ("app notin (web)", False),
    ("app", True),
    ("missing", False),
    ("!missing", True),
    ("!app", False),
    ("app=web,tier=front", True),
    ("app=web,tier=back", False),
    ("app=web, !missing, tier in (front)", True),
    ("example.com/team=a", True),
    ("example.com/team in (b)", False),
    ("empty=", True),
    ("empty in (a,)", True),  # a trailing comma adds the empty value
    ("app=", False),
    ("n>4", True),
    ("n>5", False),
    ("n<6", True),
    ("app>1", False),  # non-numeric label never matches gt/lt
    ("missing<1", False),
]


@pytest.mark.parametrize(("text", "expected"), LABEL_CASES)
def test_label_selector_matches(text: str, expected: bool) -> None:
    assert parse_label_selector(text).matches(LABELS) is expected


def test_label_selector_none_labels_and_empty() -> None:
    assert parse_label_selector(None).empty
    assert parse_label_selector("!a").matches(None)
    assert not parse_label_selector("a").matches(None)


def test_label_selector_round_trips_through_str() -> None:
    text = "app=web,tier!=back,x in (b,a),y notin (c),z,!w,n>3"
    parsed = parse_label_selector(text)
    assert str(parsed) == "app=web,tier!=back,x in (a,b),y notin (c),z,!w,n>3"
    assert parse_label_selector(str(parsed)) == parsed


LABEL_ERRORS = [
    ("app=web,", "identifier after ','"),
    (",app", "identifier after start of selector"),
    ("app=a b", "expected: ',' or 'end of string'"),
    ("app in web", "expected: '('"),
    ("app in (web", "expected: ')'"),
    ("app in ()", "values set can't be empty"),
    ("app in (a b)", "expected: ',', ')' or identifier"),
    ("app ~ web", "expected: in, notin, =, ==, !=, gt, lt"),
    ("!", "identifier after '!'"),
    ("app=-bad", "a valid label must be an empty string"),
    ("app=" + "x" * 64, "no more than 63 characters"),
    ("-bad=x", "name part must consist of alphanumeric"),
    ("a/b/c=x", "optional prefix"),
    ("/x=y", "prefix part must be non-empty"),
    ("Example.COM/x=y", "lowercase RFC 1123 subdomain"),
    ("x/=y", "name part must be non-empty"),
    ("n>x", "must be an integer"),
    ("app in (a,=)", "expected: ',', ')' or identifier"),
]


@pytest.mark.parametrize(("text", "fragment"), LABEL_ERRORS)
def test_label_selector_errors(text: str, fragment: str) -> None:
    with pytest.raises(SelectorError) as err:
        parse_label_selector(text)
    assert fragment in err.value.message


def test_label_key_errors() -> None:
    assert label_key_errors("app") == []
    assert label_key_errors("kubernetes.io/metadata.name") == []
    assert label_key_errors("x" * 64) == ["name part must be no more than 63 characters"]
    assert label_key_errors("a" * 254 + "/x") == ["prefix part must be no more than 253 characters"]


DICT_CASES: list[tuple[Any, dict[str, str] | None, bool]] = [
    ({}, LABELS, True),
    ({"matchLabels": {"app": "web"}}, LABELS, True),
    ({"matchLabels": {"app": "db"}}, LABELS, False),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "x"]}]},
     LABELS, True),
    ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]},
     LABELS, False),
    ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, LABELS, True),
    ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, LABELS, False),
    ({"matchLabels": {"app": "web"},
      "matchExpressions": [{"key": "zz", "operator": "DoesNotExist", "values": []}]},
     LABELS, True),
    ({"matchLabels": {"app": "web"}}, {}, False),
    (None, LABELS, False),  # a nil selector selects nothing
]


@pytest.mark.parametrize(("data", "labels", "expected"), DICT_CASES)
def test_label_selector_from_dict(data: Any, labels: dict[str, str] | None,
                                  expected: bool) -> None:
    assert label_selector_from_dict(data).matches(labels) is expected


DICT_ERRORS = [
    ({"matchExpressions": [{"key": "a", "operator": "In"}]}, "matchExpressions[0].values: "
                                                             "Required value"),
    ({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
     "matchExpressions[0].values: Forbidden"),
    ({"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["x"]}]},
     'matchExpressions[0].operator: Unsupported value: "Equals"'),
    ({"matchExpressions": [{"operator": "Exists"}]}, "matchExpressions[0].key: Required value"),
    ({"matchExpressions": ["x"]}, "matchExpressions[0]: must be an object"),
    ({"matchLabels": {"app": 1}}, "matchLabels.app: must be a string"),
    ({"matchLabels": {"app": "bad value"}}, "a valid label must be"),
    ({"matchLabels": ["x"]}, "matchLabels: must be a map"),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": [1]}]}, "must be strings"),
    ("app=web", "must be an object"),
]


@pytest.mark.parametrize(("data", "fragment"), DICT_ERRORS)
def test_label_selector_from_dict_errors(data: Any, fragment: str) -> None:
    with pytest.raises(SelectorError) as err:
        label_selector_from_dict(data)
    assert fragment in err.value.message


POD = {
    "metadata": {"name": "p1", "namespace": "ns"},
    "spec": {"nodeName": "node-1", "hostNetwork": False},
    "status": {"phase": "Running"},
    "involvedObject": {"uid": "u-1"},
    "odd": "a,b=c\\d",
}

FIELD_CASES = [
    ("", True),
    ("metadata.name=p1", True),
    ("metadata.name==p1", True),
    ("metadata.name!=p1", False),
    ("metadata.name=p2", False),
    ("metadata.namespace=ns,status.phase=Running", True),
    ("metadata.namespace=ns,status.phase!=Running", False),
    ("spec.nodeName=node-1", True),
    ("spec.nodeName=", False),
    ("spec.missing=", True),  # absent reads as ""
    ("spec.missing!=x", True),
    ("spec.hostNetwork=false", True),
    ("involvedObject.uid=u-1", True),
    ("odd=a\\,b\\=c\\\\d", True),  # escaped , = and backslash
    ("metadata=x", False),  # a map is not a value
    ("status.phase=Running=x", False),  # everything after the first operator is the value
]


@pytest.mark.parametrize(("text", "expected"), FIELD_CASES)
def test_field_selector_matches(text: str, expected: bool) -> None:
    assert parse_field_selector(text).matches(POD) is expected


FIELD_ERRORS = [
    ("metadata.name", "can't understand 'metadata.name'"),
    ("=x", "can't understand '=x'"),
    ("a=b,c", "can't understand 'c'"),
    ("a=b\\x", "invalid escape sequence"),
    ("a=b\\", "unterminated escape sequence"),
    ("a b=c", "can't understand"),
]


@pytest.mark.parametrize(("text", "fragment"), FIELD_ERRORS)
def test_field_selector_errors(text: str, fragment: str) -> None:
    with pytest.raises(SelectorError) as err:
        parse_field_selector(text)
    assert fragment in err.value.message


def test_field_selector_supported_fields() -> None:
    sel = parse_field_selector("spec.nodeName=n,metadata.name=x")
    assert sel.fields == {"spec.nodeName", "metadata.name"}
    sel.check_supported(selectable_fields("Pod"))
    with pytest.raises(SelectorError, match=r"field label not supported: spec\.nodeName"):
        sel.check_supported(selectable_fields("ConfigMap"))
    parse_field_selector("involvedObject.uid=u,regarding.name=n").check_supported(
        selectable_fields("Event"))
    parse_field_selector("spec.color=red").check_supported(
        selectable_fields("Widget", extra=["spec.color"]))


def test_field_value_forms() -> None:
    assert field_value({"a": {"b": 3}}, "a.b") == "3"
    assert field_value({"a": True}, "a") == "true"
    assert field_value({"a": None}, "a") == ""
    assert field_value({"a": "x"}, "a.b") == ""
