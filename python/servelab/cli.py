"""The ``servelab`` command.

    servelab demo 02 --out out/     # one of the lecture's demos
    servelab demo all               # every demo that exists
    servelab demo list              # what exists
    servelab sweep --policy batch1 static --batch-size 8 32 --rates 0.1:1:0.1 --jobs 2
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


def _sweep(args: argparse.Namespace, console: Console) -> int:
    """``servelab sweep``: the grid from the flags, run with a progress bar (servelab.sweep)."""
    from rich.progress import Progress

    from servelab import sweep as sw
    from servelab.metrics import SLO

    axes = {"batch_size": args.batch_size, "max_wait_s": args.max_wait,
            "ride_along": None if args.ride_along is None else [v == "yes" for v in args.ride_along],
            "estimator": args.estimator, "max_num_seqs": args.max_num_seqs,
            "chunked_prefill": None if args.chunked_prefill is None else [v == "yes" for v in args.chunked_prefill]}
    grid = sw.Grid(policies=args.policy, rates=sw.parse_rates(args.rates),
                   **{k: v for k, v in axes.items() if v is not None})
    slo = SLO(args.slo_ttft, args.slo_tpot)
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("simulating", total=len(grid.points()))
        result = sw.sweep(grid, n=args.n, seed=args.seed, slo=slo, jobs=args.jobs,
                          progress=lambda done, total: bar.update(task, completed=done))
    console.print(sw.table(result))
    for path in result.write(Path(args.out), args.format, plots=not args.no_plots):
        console.print(f"wrote {path}")
    return 0


def _add_sweep_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="simulate a grid of policies x parameters x arrival rates")
    p.add_argument("--policy", nargs="+", default=["batch1", "static"],
                   help="batch1, static, early_reject, continuous (default: batch1 static)")
    p.add_argument("--rates", nargs="+", default=["0.1:1.0:0.1"],
                   help="arrival rates in req/s: numbers or start:stop:step (default 0.1:1.0:0.1)")
    p.add_argument("--batch-size", type=int, nargs="+", help="static: batch sizes (default 32)")
    p.add_argument("--max-wait", type=float, nargs="+", help="static: max wait in s (default 0.2)")
    p.add_argument("--ride-along", nargs="+", choices=["yes", "no"], help="static: riders compute (default yes)")
    p.add_argument("--estimator", nargs="+", help="early_reject: mean, oracle, sigma=0.5 (default mean)")
    p.add_argument("--max-num-seqs", type=int, nargs="+", help="continuous: seats (default 256)")
    p.add_argument("--chunked-prefill", nargs="+", choices=["yes", "no"],
                   help="continuous: split long prompts over steps (default no)")
    p.add_argument("--n", type=int, default=600, help="requests per point (default 600)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slo-ttft", type=float, default=1.0, help="SLO on TTFT, s (default 1)")
    p.add_argument("--slo-tpot", type=float, default=0.05, help="SLO on TPOT, s (default 0.05)")
    p.add_argument("--jobs", type=int, default=1, help="points run at once on local cores (default 1)")
    p.add_argument("--out", default="out/sweep", help="folder for sweep.csv, sweep.json, plots")
    p.add_argument("--format", nargs="+", default=["csv", "json"], choices=["csv", "json"])
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.set_defaults(func=_sweep)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="servelab", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run one of the lecture's demos")
    demo.add_argument("name", help="demo number (01, 02, ...), 'all' or 'list'")
    demo.add_argument("--out", default="out", help="folder for plots (default: out/)")
    demo.set_defaults(func=_demo)
    _add_sweep_parser(sub)
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
