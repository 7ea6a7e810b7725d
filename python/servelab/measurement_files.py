"""Measurements as files: CSV or TOML tables of timed steps for :func:`servelab.hw_model.calibrate`
(``servelab sweep --calibration FILE``; ``benchmarks/measure_gpu.py`` writes the CSV).

One row per step of ``batch_size`` equal sequences, the fields of
:meth:`servelab.hw_model.Measurement.uniform`::

    model,gpu,tp,batch_size,new_tokens,context_len,time_s,bytes_per_param,source,notes
    LLAMA3_8B,H100,1,1,1,100,0.00788,2,torchao README,bf16 batch 1

``model`` and ``gpu`` are presets or spec files (:mod:`servelab.spec_files`); ``tp`` (default
1), ``bytes_per_param`` (default: the model's), ``source`` and ``notes`` may be left out. TOML
holds the same fields in ``[[measurement]]`` tables. A bad row is named by its number (the first
data row is row 1) with the field and value.

>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "m.csv"
>>> _ = p.write_text("model,gpu,batch_size,new_tokens,context_len,time_s\\nLLAMA3_8B,H100,1,1,100,-1\\n")
>>> read_measurements(p)
Traceback (most recent call last):
...
ValueError: m.csv row 1: time_s must be a finite number > 0.0, got -1.0
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
from pathlib import Path
from typing import Any, Iterable

from servelab.hw_model import Measurement
from servelab.spec_files import resolve_gpu, resolve_model

__all__ = ["COLUMNS", "read_measurements", "measurements_csv"]

COLUMNS = ("model", "gpu", "tp", "batch_size", "new_tokens", "context_len", "time_s", "bytes_per_param",
           "source", "notes")
_REQUIRED = ("model", "gpu", "batch_size", "new_tokens", "context_len", "time_s")
_INTS = ("tp", "batch_size", "new_tokens", "context_len")


def _number(name: str, v: Any, kind: type) -> Any:
    if isinstance(v, str):
        try:
            return kind(v.strip()) if kind is float else int(v.strip())
        except ValueError:
            raise ValueError(f"{name} must be {'a number' if kind is float else 'an integer'}, got {v!r}") from None
    return v


def _row(d: dict[str, Any]) -> Measurement:
    missing = [k for k in _REQUIRED if d.get(k) in (None, "")]
    if missing:
        raise ValueError(f"missing field(s) {', '.join(missing)}")
    unknown = sorted(set(d) - set(COLUMNS))
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}; the fields are {', '.join(COLUMNS)}")
    model = resolve_model(str(d["model"]).strip(), "model")
    if d.get("bytes_per_param") not in (None, ""):
        bpp = float(_number("bytes_per_param", d["bytes_per_param"], float))
        if bpp != model.bytes_per_param:
            model = dataclasses.replace(model, name=f"{model.name} ({bpp:g} B/param)", bytes_per_param=bpp)
    ints = {k: _number(k, d[k], int) for k in _INTS if d.get(k) not in (None, "")}
    return Measurement.uniform(model, resolve_gpu(str(d["gpu"]).strip(), "gpu"), ints["batch_size"],
                               ints["new_tokens"], ints["context_len"], _number("time_s", d["time_s"], float),
                               ints.get("tp", 1), str(d.get("source") or ""), str(d.get("notes") or ""))


def read_measurements(path: str | os.PathLike[str]) -> list[Measurement]:
    """The measurements of a ``.csv`` or ``.toml`` file (see the module's docstring)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"calibration file {str(p)!r}: cannot read it ({exc.strerror or exc})") from None
    if p.suffix.lower() == ".toml":
        try:
            import tomllib  # type: ignore[import-not-found,unused-ignore]  # 3.11+ (mypy checks as 3.10)
        except ModuleNotFoundError:  # Python 3.10: the same parser, under its PyPI name
            import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]
        try:
            rows: list[Any] = tomllib.loads(text).get("measurement", [])
        except ValueError as exc:  # TOMLDecodeError is a ValueError
            raise ValueError(f"{p.name}: not valid TOML ({exc})") from None
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise ValueError(f"{p.name}: measurements must be [[measurement]] tables")
    elif p.suffix.lower() == ".csv":
        rows = list(csv.DictReader(io.StringIO(text)))
    else:
        raise ValueError(f"calibration file must end in .csv or .toml, got {str(p)!r}")
    if not rows:
        raise ValueError(f"{p.name}: no measurements in it (an empty table cannot be fitted)")
    out = []
    for i, r in enumerate(rows, 1):
        try:
            out.append(_row(r))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{p.name} row {i}: {exc}") from None
    return out


def measurements_csv(rows: Iterable[dict[str, Any]]) -> str:
    """Rows (dicts of :data:`COLUMNS`) as the CSV text :func:`read_measurements` reads."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n", extrasaction="raise")
    w.writeheader()
    for r in rows:
        w.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in r.items()})
    return buf.getvalue()
