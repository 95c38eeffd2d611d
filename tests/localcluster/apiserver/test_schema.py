"""CRD schemas: validation messages, defaulting, pruning and structural checks."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from localcluster.apiserver.schema.field_errors import FieldError
from localcluster.apiserver.schema.pruning import apply_defaults, prune, prune_with_report
from localcluster.apiserver.schema.structural import validate_structural
from localcluster.apiserver.schema.validation import validate


def _obj(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "x.io/v1", "kind": "W", "metadata": {"name": "w"}, "spec": spec}


def _schema(spec_props: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {
        "spec": {"type": "object", "properties": spec_props, **extra}}}


# (spec property schema, value, expected error strings (all of them, in order))
VALIDATION_CASES: list[tuple[dict[str, Any], Any, list[str]]] = [
    ({"type": "integer"}, 3, []),
    ({"type": "integer"}, 3.0, []),  # a whole float is an integer in JSON
    ({"type": "integer"}, "three",
     ['spec.f: Invalid value: "string": spec.f in body must be of type integer: "string"']),
    ({"type": "integer"}, 3.5,
     ['spec.f: Invalid value: "number": spec.f in body must be of type integer: "number"']),
    ({"type": "integer"}, True,
     ['spec.f: Invalid value: "boolean": spec.f in body must be of type integer: "boolean"']),
    ({"type": "number"}, 3, []),
    ({"type": "boolean"}, "true",
     ['spec.f: Invalid value: "string": spec.f in body must be of type boolean: "string"']),
    ({"type": "string"}, None,
     ['spec.f: Invalid value: "null": spec.f in body must be of type string: "null"']),
    ({"type": "string", "nullable": True}, None, []),
    ({"type": "object"}, [],
     ['spec.f: Invalid value: "array": spec.f in body must be of type object: "array"']),
    ({"type": "string", "enum": ["a", "b"]}, "c",
     ['spec.f: Unsupported value: "c": supported values: "a", "b"']),
    ({"type": "integer", "enum": [1, 2]}, 2, []),
    ({"type": "integer", "enum": [1, 2]}, 3,
     ['spec.f: Unsupported value: 3: supported values: "1", "2"']),
    ({"type": "string", "pattern": "^[0-9]+$"}, "12a",
     ['spec.f: Invalid value: "12a": spec.f in body should match \'^[0-9]+$\'']),
    ({"type": "string", "pattern": "^[0-9]+$"}, "12", []),
    ({"type": "string", "minLength": 2}, "a",
     ['spec.f: Invalid value: "a": spec.f in body should be at least 2 chars long']),
    ({"type": "string", "maxLength": 2}, "abc",
     ["spec.f: Too long: may not be longer than 2"]),
    ({"type": "integer", "minimum": 1}, 0,
     ["spec.f: Invalid value: 0: spec.f in body should be greater than or equal to 1"]),
    ({"type": "integer", "minimum": 1, "exclusiveMinimum": True}, 1,
     ["spec.f: Invalid value: 1: spec.f in body should be greater than 1"]),
    ({"type": "integer", "maximum": 10}, 11,
     ["spec.f: Invalid value: 11: spec.f in body should be less than or equal to 10"]),
    ({"type": "number", "maximum": 10, "exclusiveMaximum": True}, 10,
     ["spec.f: Invalid value: 10: spec.f in body should be less than 10"]),
    ({"type": "integer", "multipleOf": 4}, 6,
     ["spec.f: Invalid value: 6: spec.f in body should be a multiple of 4"]),
    ({"type": "number", "multipleOf": 0.1}, 0.3, []),
    ({"type": "integer", "format": "int32"}, 2**31,
     ["spec.f: Invalid value: 2147483648: spec.f in body must be of type int32: 2147483648"]),
    ({"type": "array", "items": {"type": "string"}, "minItems": 1}, [],
     ["spec.f: Invalid value: 0: spec.f in body should have at least 1 items"]),
    ({"type": "array", "items": {"type": "string"}, "maxItems": 1}, ["a", "b"],
     ["spec.f: Too many: 2: must have at most 1 items"]),
    ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, ["a", "a"],
     ['spec.f[1]: Duplicate value: "a"']),
    ({"type": "array", "items": {"type": "integer"}}, [1, "x"],
     ['spec.f[1]: Invalid value: "string": spec.f[1] in body must be of type integer: "string"']),
    ({"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
     ["a", "b", "a"], ['spec.f[2]: Duplicate value: "a"']),
    ({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
      "items": {"type": "object", "properties": {"name": {"type": "string"},
                                                 "v": {"type": "integer"}}}},
     [{"name": "a", "v": 1}, {"name": "b"}, {"name": "a", "v": 2}],
     ['spec.f[2]: Duplicate value: {"name":"a"}']),
    ({"type": "object", "minProperties": 1}, {},
     ["spec.f: Invalid value: 0: spec.f in body should have at least 1 properties"]),
    ({"type": "object", "maxProperties": 1}, {"a": 1, "b": 2},
     ["spec.f: Too many: 2: must have at most 1 items"]),
    ({"type": "object", "required": ["source"], "properties": {"source": {"type": "string"}}},
     {}, ["spec.f.source: Required value"]),
    ({"type": "object", "additionalProperties": {"type": "integer"}}, {"a": 1, "b": "x"},
     ['spec.f.b: Invalid value: "string": spec.f.b in body must be of type integer: "string"']),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False},
     {"a": "x", "b": 1}, ["spec.f.b: Forbidden: spec.f.b in body is a forbidden property"]),
    ({"x-kubernetes-int-or-string": True}, 3, []),
    ({"x-kubernetes-int-or-string": True}, "50%", []),
    ({"x-kubernetes-int-or-string": True}, 1.5,
     ['spec.f: Invalid value: "number": spec.f in body must be of type integer or string: '
      '"number"']),
    ({"type": "object", "x-kubernetes-preserve-unknown-fields": True}, {"any": {"thing": 1}}, []),
    ({"type": "object", "x-kubernetes-embedded-resource": True,
      "x-kubernetes-preserve-unknown-fields": True}, {"metadata": {}},
     ["spec.f.apiVersion: Required value", "spec.f.kind: Required value"]),
    ({"type": "string", "format": "date-time"}, "2024-01-02T03:04:05Z", []),
    ({"type": "string", "format": "date-time"}, "2024-13-02T03:04:05Z",
     ['spec.f: Invalid value: "2024-13-02T03:04:05Z": spec.f in body must be of type '
      'date-time: "2024-13-02T03:04:05Z"']),
    ({"type": "string", "format": "date"}, "2024-02-30",
     ['spec.f: Invalid value: "2024-02-30": spec.f in body must be of type date: "2024-02-30"']),
    ({"type": "string", "format": "byte"}, "aGVsbG8=", []),
    ({"type": "string", "format": "byte"}, "not base64!",
     ['spec.f: Invalid value: "not base64!": spec.f in body must be of type byte: '
      '"not base64!"']),
    ({"type": "string", "format": "uri"}, "https://x/y", []),
    ({"type": "string", "format": "uri"}, "no scheme",
     ['spec.f: Invalid value: "no scheme": spec.f in body must be of type uri: "no scheme"']),
    ({"type": "string", "format": "uuid"}, "c0ffee00-0000-4000-8000-000000000000", []),
    ({"type": "string", "format": "ipv4"}, "10.0.0.1", []),
    ({"type": "string", "format": "ipv4"}, "::1",
     ['spec.f: Invalid value: "::1": spec.f in body must be of type ipv4: "::1"']),
    ({"type": "string", "format": "cidr"}, "10.0.0.0/8", []),
    ({"type": "string", "format": "duration"}, "1h30m", []),
    ({"type": "string", "format": "password"}, "anything", []),
    ({"type": "string", "format": "no-such-format"}, "anything", []),
    ({"type": "integer", "allOf": [{"minimum": 1}, {"maximum": 5}]}, 7,
     ["spec.f: Invalid value: 7: spec.f in body should be less than or equal to 5"]),
    ({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
      "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}, {"a": "x", "b": "y"},
     ['spec.f: Invalid value: {"a":"x","b":"y"}: spec.f in body must validate one and only '
      'one schema (oneOf). Found 2 valid alternatives']),
    ({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
      "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}, {"b": "y"}, []),
    ({"type": "object", "properties": {"a": {"type": "string"}},
      "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}, {},
     ["spec.f: Invalid value: {}: spec.f in body must validate at least one schema (anyOf)"]),
    ({"type": "string", "not": {"enum": ["bad"]}}, "bad",
     ['spec.f: Invalid value: "bad": spec.f in body must not validate the schema (not)']),
    ({"type": "string", "not": {"enum": ["bad"]}}, "good", []),
    ({"type": "string", "x-kubernetes-validations": [{"rule": "self == 'never'"}]}, "x", []),
]


@pytest.mark.parametrize(("prop", "value", "expected"), VALIDATION_CASES)
def test_validate(prop: dict[str, Any], value: Any, expected: list[str]) -> None:
    errors = validate(_obj({"f": value}), _schema({"f": prop}))
    assert [str(e) for e in errors] == expected


def test_error_types_and_causes() -> None:
    schema = _schema({"replicas": {"type": "integer"}, "mode": {"type": "string",
                                                              "enum": ["a"]}},
                     required=["source"])
    errors = validate(_obj({"replicas": "x", "mode": "b"}), schema)
    assert [e.type for e in errors] == ["FieldValueRequired", "FieldValueTypeInvalid",
                                        "FieldValueNotSupported"]
    assert errors[0].as_cause() == {"reason": "FieldValueRequired",
                                    "message": "spec.source: Required value",
                                    "field": "spec.source"}
    assert str(FieldError("", "FieldValueRequired")) == "Required value"


def test_validate_root_metadata_only_name_rules() -> None:
    schema = {"type": "object", "properties": {"metadata": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 3}}}}}
    errors = validate({"metadata": {"name": "toolong", "labels": {"a": "b"}}}, schema)
    assert [str(e) for e in errors] == ["metadata.name: Too long: may not be longer than 3"]


def test_validate_root_type() -> None:
    assert [str(e) for e in validate([], {"type": "object"})] == [
        'Invalid value: "array": body in body must be of type object: "array"']


# ------------------------------------------------------------------ defaulting

DEFAULT_CASES: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    ({"r": {"type": "integer", "default": 1}}, {}, {"r": 1}),
    ({"r": {"type": "integer", "default": 1}}, {"r": 5}, {"r": 5}),
    ({"r": {"type": "integer", "default": 1}}, {"r": None}, {"r": 1}),  # null, not nullable
    ({"r": {"type": "integer", "nullable": True, "default": 1}}, {"r": None}, {"r": None}),
    ({"r": {"type": "integer"}}, {"r": None}, {}),  # non-nullable null without default: dropped
    ({"r": {"type": "integer", "nullable": True}}, {"r": None}, {"r": None}),
    # defaults apply inside a defaulted object, top-down
    ({"o": {"type": "object", "default": {},
            "properties": {"a": {"type": "string", "default": "x"}}}}, {}, {"o": {"a": "x"}}),
    ({"o": {"type": "object", "properties": {"a": {"type": "string", "default": "x"}}}},
     {}, {}),  # no default for o itself: nothing to recurse into
    ({"l": {"type": "array", "items": {"type": "object", "properties": {
        "p": {"type": "integer", "default": 80}}}}},
     {"l": [{}, {"p": 1}]}, {"l": [{"p": 80}, {"p": 1}]}),
    ({"l": {"type": "array", "items": {"type": "string", "default": "d"}}},
     {"l": ["a", None]}, {"l": ["a", "d"]}),
    ({"m": {"type": "object", "additionalProperties": {"type": "object", "properties": {
        "size": {"type": "string", "default": "1Gi"}}}}},
     {"m": {"x": {}, "y": {"size": "2Gi"}}}, {"m": {"x": {"size": "1Gi"}, "y": {"size": "2Gi"}}}),
    ({"d": {"type": "object", "default": {"k": [1]}}}, {}, {"d": {"k": [1]}}),
]


@pytest.mark.parametrize(("props", "spec", "expected"), DEFAULT_CASES)
def test_apply_defaults(props: dict[str, Any], spec: dict[str, Any],
                        expected: dict[str, Any]) -> None:
    obj = _obj(spec)
    before = copy.deepcopy(obj)
    out = apply_defaults(obj, _schema(props))
    assert out["spec"] == expected
    assert obj == before


def test_defaults_are_copies() -> None:
    schema = _schema({"d": {"type": "object", "default": {"k": [1]}}})
    out = apply_defaults(_obj({}), schema)
    out["spec"]["d"]["k"].append(2)
    assert schema["properties"]["spec"]["properties"]["d"]["default"] == {"k": [1]}


# ------------------------------------------------------------------ pruning

PRUNE_SCHEMA = {
    "type": "object",
    "properties": {
        "spec": {"type": "object", "properties": {
            "a": {"type": "string"},
            "nested": {"type": "object", "properties": {"x": {"type": "integer"}}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                     "properties": {"known": {"type": "object", "properties": {}}}},
            "map": {"type": "object", "additionalProperties": {
                "type": "object", "properties": {"v": {"type": "string"}}}},
            "list": {"type": "array", "items": {"type": "object", "properties": {
                "n": {"type": "string"}}}},
            "embedded": {"type": "object", "x-kubernetes-embedded-resource": True,
                         "properties": {"spec": {"type": "object", "properties": {}}}},
            "any": {"x-kubernetes-int-or-string": True},
        }},
        "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
    },
}


def test_prune() -> None:
    obj = {
        "apiVersion": "x.io/v1", "kind": "W",
        "metadata": {"name": "w", "labels": {"a": "b"}, "whatever": 1},
        "spec": {
            "a": "keep", "unknown": 1,
            "nested": {"x": 1, "y": 2},
            "free": {"anything": {"deep": True}, "known": {"drop": 1}},
            "map": {"k1": {"v": "1", "junk": 2}},
            "list": [{"n": "a", "junk": 1}],
            "embedded": {"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": "p", "bogus": 1},
                         "spec": {"gone": 1}, "extra": 1},
            "any": "50%",
        },
        "topLevelJunk": 1,
    }
    before = copy.deepcopy(obj)
    out, pruned = prune_with_report(obj, PRUNE_SCHEMA)
    assert out == {
        "apiVersion": "x.io/v1", "kind": "W",
        "metadata": {"name": "w", "labels": {"a": "b"}, "whatever": 1},
        "spec": {
            "a": "keep",
            "nested": {"x": 1},
            "free": {"anything": {"deep": True}, "known": {}},
            "map": {"k1": {"v": "1"}},
            "list": [{"n": "a"}],
            "embedded": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                         "spec": {}},
            "any": "50%",
        },
    }
    assert sorted(pruned) == sorted([
        "spec.unknown", "spec.nested.y", "spec.free.known.drop", "spec.map.k1.junk",
        "spec.list[0].junk", "spec.embedded.metadata.bogus", "spec.embedded.spec.gone",
        "spec.embedded.extra", "topLevelJunk"])
    assert obj == before
    assert prune(obj, PRUNE_SCHEMA) == out


def test_prune_preserve_at_root() -> None:
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    obj = {"kind": "K", "spec": {"anything": 1}}
    assert prune(obj, schema) == obj


# ------------------------------------------------------------------ structural schemas

GOOD = {
    "type": "object",
    "properties": {
        "metadata": {"type": "object", "properties": {"name": {"type": "string",
                                                               "maxLength": 20}}},
        "spec": {
            "type": "object",
            "required": ["size"],
            "properties": {
                "size": {"x-kubernetes-int-or-string": True,
                         "anyOf": [{"minimum": 1}, {"pattern": "^[0-9]+Gi$"}]},
                # kubebuilder's resource quantities (CDI's DataVolume CRD has these)
                "requests": {"type": "object", "additionalProperties": {
                    "anyOf": [{"type": "integer"}, {"type": "string"}],
                    "pattern": "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))"
                               "(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|"
                               "(\\.[0-9]+))))?$",
                    "x-kubernetes-int-or-string": True}},
                "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "raw": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "items": {"type": "array", "x-kubernetes-list-type": "map",
                          "x-kubernetes-list-map-keys": ["name"],
                          "items": {"type": "object", "required": ["name"],
                                    "properties": {"name": {"type": "string"}}}},
                "src": {"type": "object", "properties": {"http": {"type": "object"},
                                                          "s3": {"type": "object"}},
                        "oneOf": [{"required": ["http"]}, {"required": ["s3"]}]},
                "tmpl": {"type": "object", "x-kubernetes-embedded-resource": True,
                         "x-kubernetes-preserve-unknown-fields": True},
            },
        },
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}


def test_structural_accepts_good_schema() -> None:
    assert validate_structural(GOOD) == []


@pytest.mark.parametrize(("requests", "expected"), [
    ({"storage": "10Gi", "cpu": 2}, []),
    ({"storage": "ten"}, ['spec.requests.storage: Invalid value: "ten": spec.requests.storage '
                          'in body should match']),
    ({"storage": 1.5}, ['spec.requests.storage: Invalid value: "number": spec.requests.storage '
                        'in body must be of type integer or string: "number"']),
])
def test_int_or_string_quantities(requests: dict[str, Any], expected: list[str]) -> None:
    obj = {"spec": {"size": 1, "requests": requests}}
    errors = [str(e) for e in validate(obj, GOOD)]
    assert len(errors) == len(expected)
    for error, prefix in zip(errors, expected, strict=True):
        assert error.startswith(prefix), error


def _with_spec_field(field: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {"spec": {"type": "object",
                                                       "properties": {"f": field}}}}


STRUCTURAL_ERRORS: list[tuple[Any, str]] = [
    ({"properties": {}}, "type: Required value: must not be empty at the root"),
    ({"type": "string"}, 'type: Invalid value: "string": must be object at the root'),
    ("nope", "the schema must be an object"),
    (_with_spec_field({"description": "no type"}),
     "properties[spec].properties[f].type: Required value: must not be empty for specified "
     "object fields"),
    (_with_spec_field({"type": "array", "items": {"description": "x"}}),
     "properties[spec].properties[f].items.type: Required value: must not be empty for "
     "specified array items"),
    (_with_spec_field({"type": "array"}), "properties[spec].properties[f].items: Required value"),
    (_with_spec_field({"type": "strin"}), 'Unsupported value: "strin"'),
    (_with_spec_field({"$ref": "#/definitions/x"}), "$ref: Forbidden: $ref is not supported"),
    (_with_spec_field({"type": "object", "additionalProperties": False}),
     "additionalProperties cannot be set to false"),
    (_with_spec_field({"type": "object", "properties": {"a": {"type": "string"}},
                       "additionalProperties": {"type": "string"}}),
     "additionalProperties and properties are mutual exclusive"),
    (_with_spec_field({"type": "array", "items": {"type": "string"}, "uniqueItems": True}),
     "uniqueItems cannot be set to true"),
    (_with_spec_field({"type": "string", "x-kubernetes-int-or-string": True}),
     "must be empty if x-kubernetes-int-or-string is true"),
    (_with_spec_field({"type": "object", "x-kubernetes-preserve-unknown-fields": False}),
     "must be true or undefined"),
    (_with_spec_field({"type": "object", "x-kubernetes-embedded-resource": True}),
     "x-kubernetes-embedded-resource: Invalid value: true"),
    (_with_spec_field({"type": "string", "pattern": "(unclosed"}),
     "must be a valid regular expression"),
    (_with_spec_field({"type": "string", "anyOf": [{"type": "string"}]}),
     "properties[spec].properties[f].anyOf[0].type: Forbidden: must be empty to be structural"),
    (_with_spec_field({"type": "object", "properties": {"a": {"type": "string"}},
                       "oneOf": [{"properties": {"b": {"minLength": 1}}}]}),
     "oneOf[0].properties[b]: Forbidden: must not specify a field not specified in the "
     "structural part"),
    (_with_spec_field({"type": "string", "not": {"default": "x"}}),
     "not.default: Forbidden"),
    (_with_spec_field({"x-kubernetes-int-or-string": True,
                       "anyOf": [{"type": "integer"}, {"type": "boolean"}]}),
     "anyOf[1].type: Forbidden"),
    (_with_spec_field({"type": "array", "x-kubernetes-list-type": "map",
                       "items": {"type": "object", "properties": {}}}),
     "x-kubernetes-list-map-keys: Required value"),
    (_with_spec_field({"type": "array", "x-kubernetes-list-type": "map",
                       "x-kubernetes-list-map-keys": ["name"],
                       "items": {"type": "object", "properties": {}}}),
     'Invalid value: "name": entries must all be names of item properties'),
    (_with_spec_field({"type": "array", "x-kubernetes-list-type": "bag",
                       "items": {"type": "string"}}), 'Unsupported value: "bag"'),
    (_with_spec_field({"type": "array", "x-kubernetes-list-type": "set",
                       "items": {"type": "object"}}), "set lists must have scalar items"),
    (_with_spec_field({"type": "array", "x-kubernetes-list-map-keys": ["a"],
                       "items": {"type": "string"}}),
     "must not be set if x-kubernetes-list-type is not map"),
    (_with_spec_field({"type": "integer", "default": "x"}),
     'properties[spec].properties[f].default: Invalid value: "string": '
     'properties[spec].properties[f].default in body must be of type integer: "string"'),
    (_with_spec_field({"type": "object", "default": {"junk": 1}, "properties": {}}),
     "default: Invalid value: must not have unknown fields (junk)"),
    (_with_spec_field({"type": "string", "default": None}), "must not be null"),
    ({"type": "object", "properties": {"metadata": {"type": "object", "properties": {
        "labels": {"type": "object"}}}}},
     "properties[metadata]: Forbidden: must not specify anything other than name and "
     "generateName"),
]


@pytest.mark.parametrize(("schema", "fragment"), STRUCTURAL_ERRORS)
def test_structural_rejects(schema: Any, fragment: str) -> None:
    errors = validate_structural(schema)
    assert any(fragment in e for e in errors), errors
