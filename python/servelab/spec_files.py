"""A model or a GPU by preset name, or from a TOML/JSON spec file (``servelab sweep --model``).

The presets are :mod:`servelab.hw_model`'s: a name matches either the Python name
(``LLAMA3_70B``, ``A100_80GB``) or the spec's own (``Llama-3-70B``, ``H100-SXM``), ignoring case,
``-`` and ``_``. A spec file holds the fields of :class:`~servelab.hw_model.ModelSpec` or
:class:`~servelab.hw_model.GpuSpec`, at the top level or in a ``[model]`` / ``[gpu]`` table (so
one file can describe both); ``name`` defaults to the file's stem::

    # mistral-7b.toml
    n_layers = 32
    d_model = 4096
    n_heads = 32
    n_kv_heads = 8
    d_head = 128
    d_ff = 14336
    vocab_size = 32000

>>> resolve_model("LLAMA3_70B").name
'Llama-3-70B'
>>> resolve_gpu("a100-80gb").memory_bytes / 1e9
80.0
>>> resolve_gpu("B200")
Traceback (most recent call last):
...
ValueError: gpu must be a preset (H100, H200, A100_80GB, H100_FP8, H200_FP8) or a .toml/.json spec file, got 'B200'
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import typing
from pathlib import Path
from typing import Any, TypeVar

from servelab import _checks
from servelab import hw_model as hw
from servelab.hw_model import GpuSpec, ModelSpec

__all__ = ["model_presets", "gpu_presets", "resolve_model", "resolve_gpu"]

Spec = TypeVar("Spec", ModelSpec, GpuSpec)


def _presets(cls: type[Spec]) -> dict[str, Spec]:
    # every upper-case constant of hw_model of this type: a preset added there shows up here
    return {name: v for name, v in vars(hw).items() if name.isupper() and isinstance(v, cls)}


def model_presets() -> dict[str, ModelSpec]:
    """``{"LLAMA3_8B": LLAMA3_8B, ...}``: hw_model's models."""
    return _presets(ModelSpec)


def gpu_presets() -> dict[str, GpuSpec]:
    """``{"H100": H100, ...}``: hw_model's GPUs."""
    return _presets(GpuSpec)


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _resolve(value: Any, cls: type[Spec], what: str) -> Spec:
    if isinstance(value, cls):
        return value
    presets = _presets(cls)
    choices = f"a preset ({', '.join(presets)}) or a .toml/.json spec file"
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{what} must be a {cls.__name__}, {choices}, got {value!r}")
    text = os.fspath(value)
    for const, spec in presets.items():
        if _key(text) and _key(text) in (_key(const), _key(spec.name)):
            return spec
    path = Path(text)
    if path.suffix.lower() not in (".toml", ".json"):
        raise ValueError(f"{what} must be {choices}, got {text!r}")
    return _load(path, cls, what)


def resolve_model(value: ModelSpec | str | os.PathLike[str], what: str = "model") -> ModelSpec:
    """A :class:`ModelSpec` from itself, a preset name or a spec file; ``what`` names the
    argument in errors (the CLI passes ``"--model"``)."""
    return _resolve(value, ModelSpec, what)


def resolve_gpu(value: GpuSpec | str | os.PathLike[str], what: str = "gpu") -> GpuSpec:
    """A :class:`GpuSpec` from itself, a preset name or a spec file (see :func:`resolve_model`)."""
    return _resolve(value, GpuSpec, what)


def _read(path: Path, what: str) -> Any:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{what}: cannot read spec file {str(path)!r} ({exc.strerror or exc})") from None
    try:
        if path.suffix.lower() == ".json":
            return json.loads(raw)
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # Python 3.10: the same parser, under its PyPI name
            import tomli as tomllib
        return tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError and TOMLDecodeError are ValueErrors
        raise ValueError(f"{what}: spec file {str(path)!r} is not valid {path.suffix[1:].upper()}: {exc}") from None


_KINDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _load(path: Path, cls: type[Spec], what: str) -> Spec:
    doc = _read(path, what)
    kind = "model" if cls is ModelSpec else "gpu"
    where = f"{what}: spec file {str(path)!r}"
    if isinstance(doc, dict) and isinstance(doc.get(kind), dict):
        doc = doc[kind]
    if not isinstance(doc, dict):
        raise ValueError(f"{where} must hold a table of fields, got {type(doc).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    types = typing.get_type_hints(cls)
    doc = {"name": path.stem, **doc}
    unknown = [k for k in doc if k not in fields]
    if unknown:
        raise ValueError(f"{where}: unknown field {unknown[0]!r}; a {kind} has {', '.join(fields)}")
    missing = [k for k, f in fields.items() if k not in doc and f.default is dataclasses.MISSING]
    if missing:
        raise ValueError(f"{where}: missing field(s) {', '.join(missing)}")
    for k, v in doc.items():
        t = types[k]
        ok = (_checks.is_bool(v) if t is bool else _checks.is_int(v) if t is int else
              _checks.is_real(v) if t is float else isinstance(v, str))
        if not ok:
            raise ValueError(f"{where}: field {k} must be {_KINDS[t]}, got {v!r}")
    try:
        return cls(**doc)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
