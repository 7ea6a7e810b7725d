"""The lecture's demos, one module each: ``demo01`` ... ``demo04`` (and more as the course grows).

Each demo module defines ``TITLE`` (one line) and ``run(out_dir, console)``, which prints its
parts as rich tables and writes any plots into ``out_dir``. The CLI finds demos by module name,
so adding ``demoNN.py`` (or ``demo_name.py``) here is all it takes to register one.
"""

from __future__ import annotations

import importlib
import pkgutil
from contextlib import contextmanager
from types import ModuleType
from typing import Iterator

from rich.console import Console
from rich.table import Table


def available() -> list[str]:
    """Names of the demos that exist, in order: ``['01', '02', ...]``."""
    names = [m.name[len("demo"):] for m in pkgutil.iter_modules(__path__)
             if m.name.startswith("demo")]
    return sorted(n.lstrip("_") for n in names)


def load(name: str) -> ModuleType:
    """The demo module called ``name`` (``'02'`` or ``'2'`` -> ``servelab.demos.demo02``)."""
    key = name.zfill(2) if name.isdigit() else name
    if key not in available():
        raise ValueError(f"demo must be one of {', '.join(available())} or 'all', got {name!r}")
    return importlib.import_module(f"{__name__}.demo{key if key.isdigit() else '_' + key}")


@contextmanager
def working(console: Console, what: str) -> Iterator[None]:
    """Says ``what`` while a step of more than a couple of seconds runs: a spinner on a
    terminal (gone when the step ends), one plain line when the output is piped or logged."""
    if console.is_terminal:
        with console.status(f"{what}\u2026"):
            yield
    else:
        console.print(f"{what}...", highlight=False)
        yield


def table(title: str, *columns: str) -> Table:
    """A demo's table: the title on the left, the first column left-aligned and never wrapped
    (it names the row), the others right-aligned (numbers).

    >>> [c.justify for c in table("t", "policy", "TTFT").columns]
    ['left', 'right']
    """
    t = Table(title=title, title_justify="left")
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 else "right", no_wrap=i == 0)
    return t
