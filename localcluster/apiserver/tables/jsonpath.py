"""The subset of Kubernetes JSONPath used by CRD ``additionalPrinterColumns``.

Supported: ``.a.b``, escaped dots (``.metadata.labels.app\\.kubernetes\\.io/name``),
bracketed keys (``['a.b']``), indexes (``[0]``, ``[-1]``), slices (``[0:2]``), the
wildcard (``[*]``, ``.*``) and filters on a relative path (``[?(@.type=="Ready")]``,
``!=``, numeric ``<``/``>``, or bare existence ``[?(@.x)]``). Optional ``{...}`` braces
are accepted. :func:`find` returns every match, in document order.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any


class JSONPathError(ValueError):
    """An expression outside the supported subset."""


@dataclass(frozen=True)
class _Key:
    name: str


@dataclass(frozen=True)
class _Index:
    start: int | None
    stop: int | None
    single: bool


@dataclass(frozen=True)
class _Wildcard:
    pass


@dataclass(frozen=True)
class _Filter:
    path: tuple[Any, ...]
    op: str | None
    literal: Any


Step = _Key | _Index | _Wildcard | _Filter

_FILTER = re.compile(r"^\s*@((?:\.[^=!<>\s]+)*)\s*(?:(==|!=|<=|>=|<|>)\s*(.+?))?\s*$")


def parse(expression: str) -> tuple[Step, ...]:
    """Compile ``expression``; raises :class:`JSONPathError` outside the subset."""
    text = expression.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    if text.startswith("$"):
        text = text[1:]
    if not text.startswith((".", "[")):
        raise JSONPathError(f"JSONPath {expression!r} must start with '.' or '['")
    steps: list[Step] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == ".":
            i += 1
            name, i = _read_name(text, i)
            if not name:
                if i >= len(text):
                    break  # a lone "." is the whole object
                raise JSONPathError(f"JSONPath {expression!r}: empty field name at {i}")
            steps.append(_Wildcard() if name == "*" else _Key(name))
        elif ch == "[":
            end = _closing_bracket(text, i, expression)
            steps.append(_bracket(text[i + 1:end].strip(), expression))
            i = end + 1
        else:
            raise JSONPathError(f"JSONPath {expression!r}: unexpected {ch!r} at {i}")
    return tuple(steps)


def _read_name(text: str, i: int) -> tuple[str, int]:
    out = []
    while i < len(text) and text[i] not in ".[":
        if text[i] == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out), i


def _closing_bracket(text: str, start: int, expression: str) -> int:
    depth, quote = 0, ""
    for j in range(start, len(text)):
        ch = text[j]
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "[(":
            depth += 1
        elif ch in ")]":
            depth -= 1
            if depth == 0:
                return j
    raise JSONPathError(f"JSONPath {expression!r}: unclosed '['")


def _literal(text: str, expression: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text in ("true", "false"):
        return text == "true"
    try:
        return json.loads(text)
    except ValueError:
        raise JSONPathError(f"JSONPath {expression!r}: bad literal {text!r}") from None


def _bracket(inner: str, expression: str) -> Step:
    if inner == "*":
        return _Wildcard()
    if inner.startswith("?"):
        body = inner[1:].strip()
        if not (body.startswith("(") and body.endswith(")")):
            raise JSONPathError(f"JSONPath {expression!r}: filter must be ?(...)")
        match = _FILTER.match(body[1:-1])
        if match is None:
            raise JSONPathError(f"JSONPath {expression!r}: unsupported filter {body!r}")
        rel, op, lit = match.groups()
        path = parse(rel) if rel else ()
        return _Filter(path, op, _literal(lit, expression) if op else None)
    if len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "'\"":
        return _Key(inner[1:-1])
    if re.fullmatch(r"-?\d+", inner):
        return _Index(int(inner), None, True)
    slice_match = re.fullmatch(r"(-?\d*)\s*:\s*(-?\d*)", inner)
    if slice_match:
        start, stop = slice_match.groups()
        return _Index(int(start) if start else None, int(stop) if stop else None, False)
    raise JSONPathError(f"JSONPath {expression!r}: unsupported subscript [{inner}]")


def _compare(value: Any, op: str, literal: Any) -> bool:
    if op == "==":
        return bool(value == literal)
    if op == "!=":
        return bool(value != literal)
    if not isinstance(value, int | float) or not isinstance(literal, int | float):
        return False
    return {"<": value < literal, ">": value > literal, "<=": value <= literal,
            ">=": value >= literal}[op]



def _apply(steps: tuple[Step, ...], node: Any) -> list[Any]:
    current = [node]
    for step in steps:
        following: list[Any] = []
        for item in current:
            if isinstance(step, _Key):
                if isinstance(item, dict) and step.name in item:
                    following.append(item[step.name])
            elif isinstance(step, _Wildcard):
                if isinstance(item, dict):
                    following.extend(item.values())
                elif isinstance(item, list):
                    following.extend(item)
            elif isinstance(step, _Index):
                if not isinstance(item, list):
                    continue
                if step.single:
                    assert step.start is not None
                    if -len(item) <= step.start < len(item):
                        following.append(item[step.start])
                else:
                    following.extend(item[step.start:step.stop])
            else:
                candidates = item if isinstance(item, list) else [item]
                for candidate in candidates:
                    found = _apply(step.path, candidate)
                    if step.op is None:
                        if found:
                            following.append(candidate)
                    elif found and _compare(found[0], step.op, step.literal):
                        following.append(candidate)
        current = following
    return current


def find(expression: str | tuple[Step, ...], obj: Any) -> list[Any]:
    """All values ``expression`` selects in ``obj``."""
    steps = parse(expression) if isinstance(expression, str) else expression
    return _apply(steps, obj)
