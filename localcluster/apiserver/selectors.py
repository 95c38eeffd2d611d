"""Label and field selectors: the ``labelSelector``/``fieldSelector`` of list and watch.

Label selectors follow Kubernetes' grammar (``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``,
``a notin (x,y)``, ``a``, ``!a``, and the numeric ``a>1``/``a<1``), with label keys and
values validated as the API validates them; the structured form used in objects
(``matchLabels``/``matchExpressions``) compiles to the same requirements. Field selectors
are ``path=value``/``path==value``/``path!=value`` terms over dotted paths, with
``\\,``, ``\\=`` and ``\\\\`` escapes. Both are pure and raise :class:`SelectorError` (a 400
for the server) on bad syntax.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


class SelectorError(ValueError):
    """A selector that does not parse or names an unsupported field."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# ------------------------------------------------------------------------- validation

_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VALUE_HELP = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character"
)
_NAME_HELP = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character"
)


def label_key_errors(key: str) -> list[str]:
    """Why ``key`` is not a valid label key (``[prefix/]name``); empty if it is."""
    errors = []
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        errors.append("prefix part must be non-empty")
    if key.count("/") > 1:
        errors.append("a qualified name must consist of an optional prefix, '/' and a name")
        return errors
    if prefix:
        if len(prefix) > 253:
            errors.append("prefix part must be no more than 253 characters")
        elif not _DNS_SUBDOMAIN.match(prefix):
            errors.append("prefix part a lowercase RFC 1123 subdomain must consist of lower "
                          "case alphanumeric characters, '-' or '.', and must start and end "
                          "with an alphanumeric character")
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part must be no more than 63 characters")
    elif not _NAME.match(name):
        errors.append(_NAME_HELP)
    return errors


def label_value_errors(value: str) -> list[str]:
    """Why ``value`` is not a valid label value; empty if it is."""
    if value == "":
        return []
    if len(value) > 63:
        return ["must be no more than 63 characters"]
    if not _NAME.match(value):
        return [_VALUE_HELP]
    return []


def _check_key(key: str) -> None:
    errors = label_key_errors(key)
    if errors:
        raise SelectorError(f'unable to parse requirement: key: Invalid value: "{key}": '
                            + "; ".join(errors))


def _check_value(key: str, value: str) -> None:
    errors = label_value_errors(value)
    if errors:
        raise SelectorError(f'unable to parse requirement: values[0][{key}]: Invalid value: '
                            f'"{value}": ' + "; ".join(errors))


# ---------------------------------------------------------------------- label selectors

OPERATORS = ("=", "==", "!=", "in", "notin", "exists", "!", "gt", "lt")


@dataclass(frozen=True)
class Requirement:
    """One term of a label selector."""

    key: str
    operator: str  # one of OPERATORS ("!" is does-not-exist; "=" and "==" mean "in")
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator in ("=", "==", "in"):
            return present and labels[self.key] in self.values
        if self.operator in ("!=", "notin"):
            return not present or labels[self.key] not in self.values
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        # gt / lt: both sides must be integers, else no match (as upstream).
        if not present:
            return False
        try:
            have, want = int(labels[self.key]), int(self.values[0])
        except ValueError:
            return False
        return have > want if self.operator == "gt" else have < want

    def __str__(self) -> str:
        if self.operator == "exists":
            return self.key
        if self.operator == "!":
            return "!" + self.key
        if self.operator in ("in", "notin"):
            return f"{self.key} {self.operator} ({','.join(sorted(self.values))})"
        symbol = {"gt": ">", "lt": "<"}.get(self.operator, self.operator)
        return f"{self.key}{symbol}{self.values[0]}"


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of requirements; ``nothing`` matches no object at all."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.nothing:
            return False
        have = labels or {}
        return all(r.matches(have) for r in self.requirements)

    @property
    def empty(self) -> bool:
        """True when it selects everything."""
        return not self.requirements and not self.nothing

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


_TOKEN = re.compile(r"\s*(?:(?P<op>==|!=|=|!|\(|\)|,|>|<)|(?P<ident>[^\s=!(),<>]+))")


def _tokens(text: str) -> list[str]:
    out = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None:  # pragma: no cover - the pattern accepts any non-space char
            raise SelectorError(f"unable to parse {text!r}")
        out.append(match.group("op") or match.group("ident"))
        pos = match.end()
    return out


def _expect_ident(tokens: list[str], i: int, after: str) -> str:
    if i >= len(tokens) or tokens[i] in ("==", "!=", "=", "!", "(", ")", ",", ">", "<"):
        found = tokens[i] if i < len(tokens) else ""
        raise SelectorError(f"found '{found}', expected: identifier after {after}")
    return tokens[i]


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse the string form (``?labelSelector=``); empty selects everything."""
    tokens = _tokens(text or "")
    requirements: list[Requirement] = []
    i = 0
    while i < len(tokens):
        if tokens[i] == "!":
            key = _expect_ident(tokens, i + 1, "'!'")
            _check_key(key)
            requirements.append(Requirement(key, "!"))
            i += 2
        else:
            key = _expect_ident(tokens, i, "','" if requirements else "start of selector")
            _check_key(key)
            i += 1
            op = tokens[i] if i < len(tokens) else None
            if op is None or op == ",":
                requirements.append(Requirement(key, "exists"))
            elif op in ("=", "==", "!=", ">", "<"):
                i += 1
                if i < len(tokens) and tokens[i] not in (",", "(", ")", "=", "==", "!=", "!"):
                    value = tokens[i]
                    i += 1
                else:
                    value = ""
                if op in (">", "<"):
                    if not re.fullmatch(r"-?\d+", value):
                        raise SelectorError(f"unable to parse requirement: for 'Gt', 'Lt' "
                                            f"operators, the value must be an integer: "
                                            f"{value!r}")
                    requirements.append(Requirement(key, "gt" if op == ">" else "lt", (value,)))
                else:
                    _check_value(key, value)
                    requirements.append(Requirement(key, op, (value,)))
            elif op in ("in", "notin"):
                values, i = _parse_set(tokens, i + 1, key)
                requirements.append(Requirement(key, op, values))
            else:
                raise SelectorError(f"found '{op}', expected: in, notin, =, ==, !=, gt, lt")
        if i < len(tokens):
            if tokens[i] != ",":
                raise SelectorError(f"found '{tokens[i]}', expected: ',' or 'end of string'")
            i += 1
            if i == len(tokens):
                raise SelectorError("found '', expected: identifier after ','")
    return LabelSelector(tuple(requirements))


def _parse_set(tokens: list[str], i: int, key: str) -> tuple[tuple[str, ...], int]:
    if i >= len(tokens) or tokens[i] != "(":
        found = tokens[i] if i < len(tokens) else ""
        raise SelectorError(f"found '{found}', expected: '('")
    i += 1
    values: list[str] = []
    expect_value = True
    while True:
        if i >= len(tokens):
            raise SelectorError("found '', expected: ')'")
        tok = tokens[i]
        if tok == ")":
            if expect_value and values:  # "(a,)" means an empty value after the comma
                values.append("")
            i += 1
            break
        if tok == ",":
            if expect_value:
                values.append("")
            expect_value = True
        elif expect_value and tok not in ("(", "=", "==", "!=", "!", ">", "<"):
            values.append(tok)
            expect_value = False
        else:
            raise SelectorError(f"found '{tok}', expected: ',', ')' or identifier")
        i += 1
    if not values:
        raise SelectorError(f"unable to parse requirement: values: Invalid value: []: for "
                            f"'in', 'notin' operators, values set can't be empty ({key})")
    for value in values:
        _check_value(key, value)
    return tuple(sorted(set(values))), i


_EXPRESSION_OPS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def label_selector_from_dict(data: Mapping[str, Any] | None) -> LabelSelector:
    """Compile ``{matchLabels, matchExpressions}``; None selects nothing, ``{}`` everything."""
    if data is None:
        return LabelSelector(nothing=True)
    if not isinstance(data, Mapping):
        raise SelectorError("selector must be an object with matchLabels/matchExpressions")
    requirements: list[Requirement] = []
    match_labels = data.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise SelectorError("matchLabels: must be a map of strings")
    for key, value in sorted(match_labels.items()):
        if not isinstance(value, str):
            raise SelectorError(f"matchLabels.{key}: must be a string")
        _check_key(key)
        _check_value(key, value)
        requirements.append(Requirement(key, "in", (value,)))
    for n, expr in enumerate(data.get("matchExpressions") or []):
        where = f"matchExpressions[{n}]"
        if not isinstance(expr, Mapping):
            raise SelectorError(f"{where}: must be an object")
        key, operator = expr.get("key"), expr.get("operator")
        values = expr.get("values") or []
        if not isinstance(key, str):
            raise SelectorError(f"{where}.key: Required value")
        _check_key(key)
        if operator not in _EXPRESSION_OPS:
            raise SelectorError(f'{where}.operator: Unsupported value: "{operator}": supported '
                                f'values: "DoesNotExist", "Exists", "In", "NotIn"')
        op = _EXPRESSION_OPS[operator]
        if op in ("in", "notin") and not values:
            raise SelectorError(f"{where}.values: Required value: must be specified when "
                                f"`operator` is 'In' or 'NotIn'")
        if op in ("exists", "!") and values:
            raise SelectorError(f"{where}.values: Forbidden: may not be specified when "
                                f"`operator` is 'Exists' or 'DoesNotExist'")
        for value in values:
            if not isinstance(value, str):
                raise SelectorError(f"{where}.values: must be strings")
            _check_value(key, value)
        requirements.append(Requirement(key, op, tuple(values)))
    return LabelSelector(tuple(requirements))


# ---------------------------------------------------------------------- field selectors


@dataclass(frozen=True)
class FieldRequirement:
    """``field`` compared (``=`` or ``!=``) to ``value``."""

    field: str
    equal: bool
    value: str

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (field_value(obj, self.field) == self.value) is self.equal


@dataclass(frozen=True)
class FieldSelector:
    """A conjunction of field requirements; empty selects everything."""

    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all(r.matches(obj) for r in self.requirements)

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(r.field for r in self.requirements)

    def check_supported(self, supported: Iterable[str]) -> None:
        """Raise like kube-apiserver for a field this resource does not index."""
        allowed = set(supported)
        for r in self.requirements:
            if r.field not in allowed:
                raise SelectorError(f'field label not supported: {r.field}')


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string form of a dotted path in ``obj`` ("" when absent; booleans lowercase)."""
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return ""
        node = node[part]
    if node is None or isinstance(node, dict | list):
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, current, escaped = [], [], False
    for ch in text:
        if escaped:
            current.append("\\" + ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if escaped:
        raise SelectorError(f"invalid field selector: {text!r}: unterminated escape sequence")
    parts.append("".join(current))
    return parts


def _unescape(value: str, term: str) -> str:
    out, i = [], 0
    while i < len(value):
        if value[i] == "\\":
            nxt = value[i + 1] if i + 1 < len(value) else ""
            if nxt not in ("\\", ",", "="):
                raise SelectorError(f"invalid field selector: {term!r}: invalid escape "
                                    f"sequence '\\{nxt}'")
            out.append(nxt)
            i += 2
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def _find_operator(term: str) -> tuple[int, str] | None:
    i = 0
    while i < len(term):
        if term[i] == "\\":
            i += 2
            continue
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return i, op
        i += 1
    return None


def parse_field_selector(text: str | None) -> FieldSelector:
    """Parse ``?fieldSelector=`` (``metadata.name=x,status.phase!=Running``)."""
    if not text or not text.strip():
        return FieldSelector()
    requirements = []
    for term in _split_unescaped(text, ","):
        found = _find_operator(term)
        if found is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        at, op = found
        field = term[:at].strip()
        if not field or not re.fullmatch(r"[A-Za-z0-9_.\-/]+", field):
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        value = _unescape(term[at + len(op):], term)
        requirements.append(FieldRequirement(field, op != "!=", value))
    return FieldSelector(tuple(requirements))


# Fields kube-apiserver lets you select on, per kind (metadata.name/namespace always).
SELECTABLE_FIELDS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
            "spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP",
            "status.nominatedNodeName"),
    "Event": ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
              "involvedObject.uid", "involvedObject.apiVersion",
              "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason",
              "reportingComponent", "source", "type",
              # events.k8s.io/v1 names for the same fields
              "regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid",
              "regarding.apiVersion", "regarding.resourceVersion", "regarding.fieldPath",
              "reportingController"),
    "Secret": ("type",),
    "Namespace": ("status.phase",),
    "Node": ("spec.unschedulable",),
    "ReplicaSet": ("status.replicas",),
    "Job": ("status.successful",),
    "CertificateSigningRequest": ("spec.signerName",),
}


def selectable_fields(kind: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The fields of ``kind`` a field selector may use; ``extra`` for CRD selectableFields."""
    return frozenset(("metadata.name", "metadata.namespace",
                      *SELECTABLE_FIELDS.get(kind, ()), *extra))
