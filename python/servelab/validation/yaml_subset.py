"""The little YAML that inference-perf writes (its resolved ``config.yaml``) and that a vLLM
launch file holds (``exp-config.yaml``): block mappings, block lists of scalars or mappings,
``[]`` / ``{}``, and plain scalars. It is read here rather than with a YAML library, so that
``servelab validate`` needs nothing beyond the kit's own dependencies.

Anything outside that subset (anchors, multi-line strings, flow collections with items, tabs)
is refused with a ``ValueError`` naming the file and line, never guessed at.

>>> text = '''
... load:
...   type: constant
...   stages:
...   - rate: 5.0
...     duration: 600
...   sweep: null
...   circuit_breakers: []
... model: meta-llama/Llama-2-7b-hf
... '''
>>> loads(text)
{'load': {'type': 'constant', 'stages': [{'rate': 5.0, 'duration': 600}], 'sweep': None, 'circuit_breakers': []}, 'model': 'meta-llama/Llama-2-7b-hf'}
>>> loads("a: [1, 2]", "x.yaml")
Traceback (most recent call last):
...
ValueError: x.yaml line 1: a flow collection with items ('[1, 2]') is outside the YAML subset read here
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["loads", "scalar"]

_INT = re.compile(r"[-+]?[0-9]+")
_FLOAT = re.compile(r"[-+]?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)([eE][-+]?[0-9]+)?")


def scalar(text: str) -> Any:
    """A plain YAML scalar: null, a bool, an int, a float, or a string (quotes removed).

    >>> [scalar(s) for s in ("null", "true", "600", "5.0", "'x: y'", "http://a:8000")]
    [None, True, 600, 5.0, 'x: y', 'http://a:8000']
    """
    t = text.strip()
    if t in ("", "null", "~", "Null", "NULL"):
        return None
    if t in ("true", "True", "TRUE"):
        return True
    if t in ("false", "False", "FALSE"):
        return False
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return t[1:-1]
    if _INT.fullmatch(t):
        return int(t)
    if _FLOAT.fullmatch(t):
        return float(t)
    return t


def _lines(text: str, where: str) -> list[tuple[int, int, str]]:
    """(line number, indent, content) of each meaningful line."""
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise ValueError(f"{where} line {n}: a tab in the indentation is outside the YAML subset read here")
        body = raw.strip()
        if not body or body.startswith("#") or body in ("---", "..."):
            continue
        if body[0] in "&*!|>" or body.startswith("? "):
            raise ValueError(f"{where} line {n}: {body!r} is outside the YAML subset read here")
        out.append((n, len(raw) - len(raw.lstrip(" ")), body))
    return out


def _value(body: str, n: int, where: str) -> Any:
    if body in ("[]", "{}"):
        return [] if body == "[]" else {}
    if body[0] in "&*!|>":
        raise ValueError(f"{where} line {n}: {body!r} (an anchor, alias, tag or block scalar) is outside the YAML "
                         "subset read here")
    if body[0] in "[{":
        raise ValueError(f"{where} line {n}: a flow collection with items ({body!r}) is outside the "
                         "YAML subset read here")
    return scalar(body)


def _split_key(body: str) -> tuple[str, str] | None:
    """``key: rest`` -> (key, rest); None if the line is no mapping entry."""
    if body.endswith(":"):
        return body[:-1].strip(), ""
    k = body.find(": ")
    if k <= 0 or body[0] in "'\"":
        return None
    return body[:k].strip(), body[k + 2:].strip()


def _block(lines: list[tuple[int, int, str]], i: int, indent: int, where: str) -> tuple[Any, int]:
    """The block starting at ``lines[i]`` (its indent is ``indent``); returns it and the index
    after it."""
    n, _, body = lines[i]
    if body.startswith("- ") or body == "-":
        items: list[Any] = []
        while i < len(lines) and lines[i][1] == indent and (lines[i][2].startswith("- ") or lines[i][2] == "-"):
            n, _, body = lines[i]
            rest = body[1:].strip()
            if not rest:
                raise ValueError(f"{where} line {n}: an empty list item is outside the YAML subset read here")
            if _split_key(rest) is None:
                items.append(_value(rest, n, where))
                i += 1
                continue
            # a mapping inside a list item: its keys stand two columns right of the dash
            inner = [(n, indent + 2, rest)]
            j = i + 1
            while j < len(lines) and lines[j][1] > indent:
                inner.append(lines[j])
                j += 1
            value, _ = _block(inner, 0, indent + 2, where)
            items.append(value)
            i = j
        return items, i
    mapping: dict[str, Any] = {}
    while i < len(lines) and lines[i][1] == indent:
        n, _, body = lines[i]
        kv = _split_key(body)
        if kv is None:
            raise ValueError(f"{where} line {n}: expected 'key: value', got {body!r}")
        key, rest = kv
        if key in mapping:
            raise ValueError(f"{where} line {n}: key {key!r} appears twice")
        i += 1
        if rest:
            mapping[key] = _value(rest, n, where)
        elif i < len(lines) and (lines[i][1] > indent or
                                 (lines[i][1] == indent and lines[i][2].startswith("-"))):
            mapping[key], i = _block(lines, i, lines[i][1], where)
        else:
            mapping[key] = None
    if i < len(lines) and lines[i][1] > indent:
        n = lines[i][0]
        raise ValueError(f"{where} line {n}: unexpected indentation")
    return mapping, i


def loads(text: str, where: str = "<yaml>") -> Any:
    """The document in ``text`` (``where`` names it in errors): a dict, a list or a scalar."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    lines = _lines(text, where)
    if not lines:
        return None
    if len(lines) == 1 and _split_key(lines[0][2]) is None and not lines[0][2].startswith("-"):
        return _value(lines[0][2], lines[0][0], where)
    value, i = _block(lines, 0, lines[0][1], where)
    if i < len(lines):
        raise ValueError(f"{where} line {lines[i][0]}: unexpected indentation")
    return value
