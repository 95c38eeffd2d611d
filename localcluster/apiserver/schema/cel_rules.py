"""CRD validation rules (``x-kubernetes-validations``) in CEL, as kube-apiserver runs them.

Each rule sits on a schema node and sees that node's value as ``self``; a transition rule
(one that names ``oldSelf``) also sees the stored value and only runs on updates where
both exist -- unless ``optionalOldSelf`` makes ``oldSelf`` an optional that is empty on
create. A false rule is a field error at the node (or at ``fieldPath`` below it) with the
rule's ``reason`` (default FieldValueInvalid) and its ``message``, ``messageExpression``
(evaluated; falls back to the message) or ``failed rule: <rule>``.

Rules are compiled when a CRD is written: a rule that does not parse, calls a function
this server does not provide, names a variable other than ``self``/``oldSelf``, or has a
bad ``reason``/``fieldPath``/``optionalOldSelf`` is refused there, as upstream refuses it.

The interpreter is ``common-expression-language`` (cel-rust). It has CEL's standard
library; Kubernetes' string and list extensions used in CRDs (lowerAscii, upperAscii,
trim, split, join, replace, indexOf, lastIndexOf, isSorted, sum, min, max) are added here.
Strings of ``format: date-time`` and ``format: duration`` reach rules as CEL timestamps
and durations, as upstream types them. Not provided: the optional field syntax
(``self.?x``) and the ``url``/``ip``/``quantity`` libraries; ``matches`` uses cel-rust's
regex dialect (close to RE2: no look-around, no back-references).

Cost: upstream bounds a rule by a static estimate from the schema's maxItems/maxLength and
by a runtime cost (1,000,000 per call). cel-rust has no cost counter, so before a rule
runs its cost is bounded from the data instead: the number of values under ``self``
raised to the number of comprehensions in the rule (what nested comprehensions may
iterate; one comprehension over any request-sized list passes, as upstream's does); past
:data:`PER_CALL_LIMIT` the rule is not run and the write is refused with upstream's
"cost limit exceeded" wording. The static estimate at CRD creation is not made.
"""

from __future__ import annotations

import datetime
import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import cel

from .field_errors import FORBIDDEN, INVALID, FieldError, index, join

Schema = dict[str, Any]

PER_CALL_LIMIT = 1_000_000
_REASONS = ("FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired",
            "FieldValueDuplicate")
_VARIABLES = frozenset({"self", "oldSelf"})
_MACROS = re.compile(r"\.\s*(all|exists|exists_one|map|filter)\s*\(")
_IDENT = re.compile(r"[A-Za-z]\w*")  # operators (_&&_, !_, @in...) are not named functions
_FIELD_PATH = re.compile(r"^(\.[A-Za-z_][A-Za-z0-9_]*|\[\s*'[^']*'\s*\]|\[\d+\])+$")


def _join_list(items: list[Any], sep: str = "") -> str:
    return sep.join(str(i) for i in items)


def _index_of(text: str, sub: str, start: int = 0) -> int:
    return text.find(sub, start)


def _last_index_of(text: str, sub: str, end: int | None = None) -> int:
    return text.rfind(sub, 0, None if end is None else end + len(sub))


def _replace(text: str, old: str, new: str, count: int = -1) -> str:
    return text.replace(old, new, count)


def _split(text: str, sep: str, limit: int = -1) -> list[str]:
    if limit == 0:
        return []
    return text.split(sep, limit - 1 if limit > 0 else -1)


def _is_sorted(items: list[Any]) -> bool:
    return all(a <= b for a, b in itertools.pairwise(items))


# Kubernetes' CEL extension functions (strings and lists libraries) in Python.
EXTENSIONS: dict[str, Callable[..., Any]] = {
    "lowerAscii": lambda s: "".join(c.lower() if c.isascii() else c for c in s),
    "upperAscii": lambda s: "".join(c.upper() if c.isascii() else c for c in s),
    "trim": lambda s: s.strip(),
    "split": _split,
    "join": _join_list,
    "replace": _replace,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "isSorted": _is_sorted,
    "sum": lambda items: sum(items),
    "min": lambda items: min(items),
    "max": lambda items: max(items),
}

# What cel-rust provides itself (functions a compiled rule may name).
_BUILTINS = frozenset({
    "size", "has", "contains", "startsWith", "endsWith", "matches", "int", "uint", "double",
    "string", "bytes", "bool", "dyn", "type", "duration", "timestamp", "all", "exists",
    "exists_one", "map", "filter", "hasValue", "value", "orValue", "or", "getFullYear",
    "getMonth", "getDayOfYear", "getDayOfMonth", "getDate", "getDayOfWeek", "getHours",
    "getMinutes", "getSeconds", "getMilliseconds", "max", "min",
})


class RuleError(ValueError):
    """A rule that does not compile (the message says why)."""


@dataclass(frozen=True)
class Compiled:
    program: Any
    transition: bool
    comprehensions: int


@lru_cache(maxsize=4096)
def compile_rule(source: str) -> Compiled:
    """The compiled rule; :class:`RuleError` when upstream would refuse it."""
    if not isinstance(source, str) or not source.strip():
        raise RuleError("rule must be a non-empty string")
    try:
        program = cel.compile(source)
    except (ValueError, RuntimeError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise RuleError(f"compilation failed: {first}") from None
    refs = program.references()
    unknown_vars = set(refs.get("variables", [])) - _VARIABLES - _bound_names(source)
    if unknown_vars:
        raise RuleError(f"compilation failed: undeclared reference to "
                        f"'{sorted(unknown_vars)[0]}'")
    unknown_fns = {f for f in refs.get("functions", []) if _IDENT.fullmatch(f)
                   and f not in _BUILTINS and f not in EXTENSIONS}
    if unknown_fns:
        raise RuleError(f"compilation failed: undeclared reference to "
                        f"'{sorted(unknown_fns)[0]}'")
    return Compiled(program, "oldSelf" in refs.get("variables", []),
                    len(_MACROS.findall(source)))


def _bound_names(source: str) -> set[str]:
    """Variables that comprehensions bind (``x`` in ``self.all(x, ...)``)."""
    return set(re.findall(r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_]\w*)",
                          source))


def _rules(schema: Schema) -> list[Any]:
    rules = schema.get("x-kubernetes-validations")
    return rules if isinstance(rules, list) else []


# -- CRD creation -------------------------------------------------------------------------


def _schema_nodes(schema: Any, path: str) -> Iterator[tuple[str, Schema]]:
    if not isinstance(schema, dict):
        return
    yield path, schema
    for name, sub in (schema.get("properties") or {}).items():
        yield from _schema_nodes(sub, f"{path}.properties[{name}]")
    if isinstance(schema.get("items"), dict):
        yield from _schema_nodes(schema["items"], f"{path}.items")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _schema_nodes(schema["additionalProperties"],
                                 f"{path}.additionalProperties")


def check_schema(schema: Schema) -> list[str]:
    """Problems with the schema's rules, ``path: message`` as the 422 shows them."""
    problems: list[str] = []
    for path, node in _schema_nodes(schema, ""):
        raw = node.get("x-kubernetes-validations")
        if raw is None:
            continue
        where = f"{path.lstrip('.')}.x-kubernetes-validations" if path else \
            "x-kubernetes-validations"
        if not isinstance(raw, list):
            problems.append(f"{where}: Invalid value: must be a list")
            continue
        for i, rule in enumerate(raw):
            problems += _check_rule(rule, f"{where}[{i}]")
    return problems


def _check_rule(rule: Any, where: str) -> list[str]:
    if not isinstance(rule, dict):
        return [f"{where}: Invalid value: must be an object"]
    problems: list[str] = []
    source = rule.get("rule")
    try:
        compiled = compile_rule(source)
    except RuleError as err:
        return [f'{where}.rule: Invalid value: {_quote(source)}: {err}']
    if rule.get("messageExpression") is not None:
        try:
            compile_rule(rule["messageExpression"])
        except RuleError as err:
            problems.append(f"{where}.messageExpression: Invalid value: "
                            f"{_quote(rule['messageExpression'])}: {err}")
    message = rule.get("message")
    if message is not None and (not isinstance(message, str) or not message.strip()
                                or "\n" in message):
        problems.append(f"{where}.message: Invalid value: {_quote(message)}: message must "
                        "be a non-empty string without line breaks")
    reason = rule.get("reason")
    if reason is not None and reason not in _REASONS:
        problems.append(f'{where}.reason: Unsupported value: "{reason}": supported values: '
                        + ", ".join(f'"{r}"' for r in _REASONS))
    field_path = rule.get("fieldPath")
    if field_path is not None and (not isinstance(field_path, str)
                                   or not _FIELD_PATH.match(field_path)):
        problems.append(f"{where}.fieldPath: Invalid value: {_quote(field_path)}: fieldPath "
                        "must be a valid path starting with '.'")
    if rule.get("optionalOldSelf") and not compiled.transition:
        problems.append(f"{where}.optionalOldSelf: Forbidden: may not be set if rule does "
                        "not use oldSelf")
    return problems


def _quote(value: Any) -> str:
    text = str(value)
    return '"' + text.replace('"', '\\"') + '"'


# -- evaluation ---------------------------------------------------------------------------

_MISSING = object()


def schema_has_rules(schema: Any) -> bool:
    """Whether any node of the schema carries rules (cheap on repeated calls)."""
    cached = _HAS_RULES.get(id(schema))
    if cached is not None and cached[0] is schema:
        return cached[1]
    found = any(node.get("x-kubernetes-validations") for _, node in
                _schema_nodes(schema, ""))
    if len(_HAS_RULES) > 512:
        _HAS_RULES.clear()
    _HAS_RULES[id(schema)] = (schema, found)
    return found


_HAS_RULES: dict[int, tuple[Any, bool]] = {}


def validate(obj: Any, schema: Schema, *, old: Any = None) -> list[FieldError]:
    """Every rule of ``schema`` that ``obj`` breaks (``old``: the stored object)."""
    errors: list[FieldError] = []
    _walk(obj, old if old is not None else _MISSING, schema, "", errors)
    return errors


def _walk(value: Any, old: Any, schema: Any, path: str, errors: list[FieldError]) -> None:
    if not isinstance(schema, dict) or value is None:
        return
    for rule in _rules(schema):
        _run(rule, value, old, path, schema, errors)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        old_map = old if isinstance(old, dict) else {}
        for key, item in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                _walk(item, old_map.get(key, _MISSING), sub, join(path, key), errors)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        items = schema["items"]
        keys = schema.get("x-kubernetes-list-map-keys") or []
        # Upstream correlates stored items only in map lists (by their keys) and sets.
        by_key: dict[Any, Any] = {}
        if isinstance(old, list) and schema.get("x-kubernetes-list-type") == "map" and keys:
            by_key = {tuple(o.get(k) for k in keys): o for o in old if isinstance(o, dict)}
        for i, item in enumerate(value):
            previous = _MISSING
            if by_key and isinstance(item, dict):
                previous = by_key.get(tuple(item.get(k) for k in keys), _MISSING)
            elif isinstance(old, list) and schema.get("x-kubernetes-list-type") == "set" \
                    and item in old:
                previous = item
            _walk(item, previous, items, index(path, i), errors)


def _values_count(value: Any, limit: int) -> int:
    stack = [value]
    count = 0
    while stack and count <= limit:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count


def _run(rule: Any, value: Any, old: Any, path: str, schema: Schema,
         errors: list[FieldError]) -> None:
    if not isinstance(rule, dict):
        return
    try:
        compiled = compile_rule(rule.get("rule"))
    except RuleError:
        return  # refused when the CRD was written
    optional_old = bool(rule.get("optionalOldSelf"))
    if compiled.transition and old is _MISSING and not optional_old:
        return
    where = path + rule["fieldPath"] if isinstance(rule.get("fieldPath"), str) else path
    where = where.lstrip(".")
    reason = str(rule["reason"]) if rule.get("reason") in _REASONS else INVALID
    type_name = str(schema.get("type") or "object")
    if compiled.comprehensions:
        values = _values_count(value, PER_CALL_LIMIT)
        if values ** compiled.comprehensions > PER_CALL_LIMIT:
            errors.append(FieldError(where, FORBIDDEN, "operation cancelled: actual cost "
                                     "limit exceeded: validation rule is too expensive for "
                                     "this much data"))
            return
    ctx = _context(typed(value, schema), old if old is _MISSING else typed(old, schema),
                   optional_old=optional_old)
    try:
        result = compiled.program.execute(ctx)
    except Exception as err:  # any evaluation error is the rule's answer
        errors.append(FieldError(where, INVALID, _eval_error(err), type_name))
        return
    if result is True:
        return
    errors.append(FieldError(where, reason, _message(rule, ctx), type_name))


def _eval_error(err: Exception) -> str:
    if isinstance(err, KeyError):
        return f"no such key: {err.args[0] if err.args else ''}"
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _go_duration(text: str) -> datetime.timedelta | None:
    """A Go duration string ("1h30m", "300ms", "-5s") as a timedelta, or None."""
    sign, body = (-1, text[1:]) if text.startswith("-") else (1, text.lstrip("+"))
    if body == "0":
        return datetime.timedelta(0)
    parts = _DURATION_PART.findall(body)
    if not parts or "".join(n + u for n, u in parts) != body:
        return None
    return datetime.timedelta(seconds=sign * sum(float(n) * _UNITS[u] for n, u in parts))


def _timestamp(text: str) -> datetime.datetime | None:
    try:
        parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z",
                                                                                "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def typed(value: Any, schema: Any) -> Any:
    """``value`` as CEL sees it under ``schema``: date-time and duration strings become
    timestamps and durations (others unchanged; containers are copied)."""
    if not isinstance(schema, dict) or value is None:
        return value
    if isinstance(value, str):
        fmt = schema.get("format")
        converted = _timestamp(value) if fmt == "date-time" else \
            _go_duration(value) if fmt == "duration" else None
        return value if converted is None else converted
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        out = {}
        for key, item in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            out[key] = typed(item, sub) if sub is not None else item
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [typed(item, schema["items"]) for item in value]
    return value


def _context(value: Any, old: Any, *, optional_old: bool) -> Any:
    ctx = cel.Context()
    for name, fn in EXTENSIONS.items():
        ctx.add_function(name, fn)
    ctx.add_variable("self", value)
    if optional_old:
        ctx.add_variable("oldSelf", cel.OptionalValue.none() if old is _MISSING
                         else cel.OptionalValue.of(old))
    elif old is not _MISSING:
        ctx.add_variable("oldSelf", old)
    return ctx


def _message(rule: Schema, ctx: Any) -> str:
    expression = rule.get("messageExpression")
    if isinstance(expression, str):
        try:
            text = compile_rule(expression).program.execute(ctx)
        except Exception:  # falls back to the message, as upstream does
            text = None
        if isinstance(text, str) and text.strip() and "\n" not in text:
            return text
    message = rule.get("message")
    if isinstance(message, str) and message:
        return message
    return f"failed rule: {rule.get('rule')}"
