"""Values between the grader and the child that runs student code: plain JSON, tagged for tuples,
dicts with any keys, namespaces and numpy arrays (a numeric array as its raw bytes in base64:
its bits exactly, and a model's weights cost a copy, not a JSON float per value each way).

The parent *encodes* arguments it chose itself (a dataclass such as ``hw_model.ModelSpec``
travels as a namespace of its fields: the child has no servelab to rebuild it from), and
*decodes* replies strictly: whatever bytes the child sends, what comes out is built only from
``None, bool, int, float, str, list, tuple, dict``, ``SimpleNamespace`` and numpy arrays of
numeric dtypes, so no object of the student's can reach a comparison.

>>> decode(json.loads(json.dumps(encode((1, [2.5, None], {"a": True})))))
(1, [2.5, None], {'a': True})
>>> decode({"__eq__": "always"})
Traceback (most recent call last):
ValueError: reply: unknown tagged object with keys ['__eq__']
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import math
from types import SimpleNamespace

import numpy as np

NUMERIC_KINDS = "biuf"  # numpy dtype kinds a reply may carry: bool, int, uint, float
MAX_DEPTH = 50
_PLAIN = frozenset({type(None), bool, int, float, str})


def encode(x, depth: int = 0, handle=None):
    """A JSON-ready form of a value the grader passes to student code. ``handle(obj)`` gives
    the id of an object that lives in the child (:class:`autograder.sandbox.remote.RemoteObject`)."""
    if type(x) in _PLAIN:  # most of what a test sends: numbers and strings, before any other check
        return x
    if handle is not None and getattr(type(x), "_remote_handle", False):
        return {"__handle__": handle(x)}
    if depth > MAX_DEPTH:
        raise ValueError("argument nested too deeply")
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, list):
        if all(type(v) in _PLAIN for v in x):  # token ids, lengths: no call per value
            return list(x)
        return [encode(v, depth + 1, handle) for v in x]
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return {"__tuple__": [encode(v, depth + 1, handle) for v in x]}
    if isinstance(x, dict):
        return {"__dict__": [[encode(k, depth + 1, handle), encode(v, depth + 1, handle)] for k, v in x.items()]}
    if isinstance(x, SimpleNamespace):
        return {"__ns__": {k: encode(v, depth + 1, handle) for k, v in vars(x).items()}}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {"__ns__": {f.name: encode(getattr(x, f.name), depth + 1, handle) for f in dataclasses.fields(x)}}
    if isinstance(x, np.ndarray):
        if x.dtype.kind in NUMERIC_KINDS:
            return {"__ndarray__": {"dtype": x.dtype.str, "shape": list(x.shape), "b64": array_bytes(x)}}
        return {"__ndarray__": {"dtype": x.dtype.str, "shape": list(x.shape), "data": x.ravel().tolist()}}
    if isinstance(x, np.generic):
        return {"__npscalar__": {"dtype": x.dtype.str, "value": x.item()}}
    raise TypeError(f"the grader cannot send a {type(x).__qualname__} to student code: {x!r}")


def decode(x, depth: int = 0, handle=None):
    """The value a reply stands for; ValueError on anything that is not plain data. With
    ``handle(id, kind)``, a ``__handle__`` (an object that stays in the child) becomes what it
    returns; without, a handle is refused."""
    if depth > MAX_DEPTH:
        raise ValueError("reply: nested too deeply")
    if x is None or type(x) in (bool, int, float, str):
        return x
    if type(x) is list:
        if all(type(v) in _PLAIN for v in x):  # plain values decode to themselves
            return x
        return [decode(v, depth + 1, handle) for v in x]
    if type(x) is not dict or len(x) != 1:
        raise ValueError(f"reply: unknown tagged object with keys {sorted(x) if type(x) is dict else type(x)}")
    (tag, body), = x.items()
    if tag == "__tuple__" and type(body) is list:
        return tuple(decode(v, depth + 1, handle) for v in body)
    if tag == "__dict__" and type(body) is list and all(type(p) is list and len(p) == 2 for p in body):
        out = {}
        for k, v in body:
            key = decode(k, depth + 1, handle)
            if type(key) in (list, dict) or isinstance(key, np.ndarray):
                raise ValueError("reply: a dict key must be hashable")
            out[key] = decode(v, depth + 1, handle)
        return out
    if tag == "__ns__" and type(body) is dict and all(type(k) is str and k.isidentifier() and not k.startswith("__") for k in body):
        return SimpleNamespace(**{k: decode(v, depth + 1, handle) for k, v in body.items()})
    if tag == "__handle__" and handle is not None and type(body) is dict:
        hid, kind = body.get("id"), body.get("type")
        if type(hid) is not int or type(kind) is not str:
            raise ValueError("reply: malformed handle")
        return handle(hid, kind[:200])
    if tag in ("__ndarray__", "__npscalar__") and type(body) is dict:
        dtype = np.dtype(str(body.get("dtype")))
        if dtype.kind not in NUMERIC_KINDS:
            raise ValueError(f"reply: arrays of dtype {dtype} are not accepted")
        if tag == "__npscalar__":
            return dtype.type(_plain_number(body.get("value")))
        shape = body.get("shape")
        if type(shape) is not list or not all(type(n) is int and n >= 0 for n in shape):
            raise ValueError("reply: malformed array")
        if "b64" in body:
            return _from_bytes(body["b64"], dtype, shape)
        data = body.get("data")
        if type(data) is not list:
            raise ValueError("reply: malformed array")
        flat = np.array([_plain_number(v) for v in data], dtype=dtype)
        return flat.reshape(shape)
    raise ValueError(f"reply: unknown tagged object with keys {[tag]}")


def array_bytes(x: np.ndarray) -> str:
    """A numeric array's bytes (C order) in base64.

    >>> decode(encode(np.array([[1.5, -0.0], [np.nan, 2**-1074]]))).tolist()
    [[1.5, -0.0], [nan, 5e-324]]
    """
    return base64.b64encode(np.ascontiguousarray(x).tobytes()).decode("ascii")


def _from_bytes(text, dtype: np.dtype, shape: list[int]) -> np.ndarray:
    """The array that ``text`` (base64) holds: exactly ``shape``'s count of ``dtype`` values,
    else ValueError."""
    if type(text) is not str:
        raise ValueError("reply: malformed array")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("reply: malformed array") from None
    if len(raw) != math.prod(shape) * dtype.itemsize:
        raise ValueError(f"reply: an array of shape {shape} and dtype {dtype} needs "
                         f"{math.prod(shape) * dtype.itemsize} bytes, got {len(raw)}")
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()  # writable, its own memory


def _plain_number(v):
    if type(v) not in (bool, int, float):
        raise ValueError(f"reply: array element {v!r} is not a number")
    return v
