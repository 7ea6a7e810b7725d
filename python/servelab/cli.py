"""The ``servelab`` command.

    servelab demo 02 --out out/     # one of the lecture's demos
    servelab demo all               # every demo that exists
    servelab demo list              # what exists
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from servelab import demos


def _demo(args: argparse.Namespace, console: Console) -> int:
    if args.name == "list":
        for name in demos.available():
            console.print(f"{name}  {demos.load(name).TITLE}")
        return 0
    names = demos.available() if args.name == "all" else [args.name]
    modules = [demos.load(n) for n in names]  # fail on a bad name before running anything
    out_dir = Path(args.out)
    for module in modules:
        console.rule(f"[bold]{module.TITLE}")
        module.run(out_dir, console)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="servelab", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run one of the lecture's demos")
    demo.add_argument("name", help="demo number (01, 02, ...), 'all' or 'list'")
    demo.add_argument("--out", default="out", help="folder for plots (default: out/)")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console()
    try:
        return int(args.func(args, console))
    except ValueError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
