"""Runs every ``benchmarks/bench_*.py`` module: each defines ``run(console, quick)`` and prints
its own table of ratios. ``python -m benchmarks [--quick] [NAME ...]``.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from pathlib import Path

from rich.console import Console


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).parent
    found = sorted(m.name[len("bench_"):] for m in pkgutil.iter_modules([str(here)])
                   if m.name.startswith("bench_"))
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("names", nargs="*", help=f"benchmarks to run, of {found} (default: all)")
    parser.add_argument("--quick", action="store_true", help="smaller inputs, for a smoke run")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in found]
    if unknown:
        parser.error(f"names must be among {found}, got {unknown}")
    console = Console()
    for name in args.names or found:
        console.rule(f"[bold]bench {name}")
        importlib.import_module(f"benchmarks.bench_{name}").run(console, quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
