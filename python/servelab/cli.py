"""The ``servelab`` command.

    servelab demo 02 --out out/     # one of the lecture's demos
    servelab demo all               # every demo that exists
    servelab demo list              # what exists
    servelab sweep --policy batch1 static --batch-size 8 32 --rates 0.1:1:0.1 --jobs 2
    servelab sweep --gpu A100_80GB --policy continuous --rates 1 2 4 8
    servelab sweep --calibration my_card.csv --policy continuous --rates 1 2 4 8
    servelab trace --out out/trace  # one run step by step: trace.html, trace.json
    servelab validate --calibration fitted   # the clock against measured vLLM runs on H100
    servelab --version

A bad flag stops the command before any work, with one line that names the flag, and exit
status 2. Tables fit the terminal (cells wrap; columns that still do not fit are left out, with
a note); piped or redirected, they print in full as plain text.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

import rich.console
from rich import box
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from servelab import demos

PROG = "servelab"


class UsageError(Exception):
    """A bad flag or flag combination: printed as one line (``servelab sweep: error: ...``),
    exit status 2."""


class _ParserError(UsageError):
    """argparse's own error, already formatted with the command's name."""


class Console(rich.console.Console):
    """A rich console whose tables never lose a cell silently.

    On a terminal a table wider than the window gets wrapping cells; if it still does not fit,
    its right-hand columns are left out and a note names them. Piped or redirected (a log
    file), output is plain text: no colour, ASCII borders, every table at its full width
    (prose still wraps at the console's width)."""

    def print(self, *objects: Any, **kwargs: Any) -> None:  # type: ignore[override]
        tables = [o for o in objects if isinstance(o, Table)]
        if not tables:
            super().print(*objects, **kwargs)
        elif self.is_terminal:
            notes = [self._fit(t) for t in tables]
            super().print(*objects, **kwargs)
            for note in filter(None, notes):
                super().print(note, style="dim", highlight=False)
        else:
            for t in tables:
                t.box = box.ASCII
            natural = max(Measurement.get(self, self.options.update(width=100_000), t).maximum for t in tables)
            old = self._width
            self._width = max(self.width, natural)
            try:
                super().print(*objects, **kwargs)
            finally:
                self._width = old

    def rule(self, title: Any = "", *args: Any, **kwargs: Any) -> None:
        """A heading line; piped, in plain characters (``==== title ====``)."""
        if self.is_terminal:
            super().rule(title, *args, **kwargs)
        else:
            plain = Text.from_markup(title).plain if isinstance(title, str) else str(title)
            super().print(f"==== {plain} ====", markup=False, highlight=False)

    def _fit(self, table: Table) -> str | None:
        """Makes ``table`` fit ``self.width``; returns a note on what was left out, if anything.

        Rich squeezes a table that is too wide by cutting cells (``cached aft…``). Instead, each
        column gets at least its longest word, the room left is shared by how much each column
        would like, and columns that still do not fit are dropped from the right."""
        wide = self.options.update(width=100_000)

        def measure() -> Measurement:
            return Measurement.get(self, wide, table)

        if measure().maximum <= self.width:
            return None
        dropped: list[str] = []
        while measure().minimum > self.width and len(table.columns) > 1:
            dropped.insert(0, str(table.columns.pop().header))
        # content widths of each column: its longest word .. its longest line
        ranges = [Measurement(max([col.min_width or 0] + [Measurement.get(self, wide, c).minimum for c in cells]),
                              max([col.min_width or 0] + [Measurement.get(self, wide, c).maximum for c in cells]))
                  for col in table.columns for cells in [[col.header, *col.cells]]]
        slack = max(0, self.width - measure().minimum)
        want = sum(r.maximum - r.minimum for r in ranges) or 1
        for col, r in zip(table.columns, ranges):
            col.width = r.minimum + min(r.maximum - r.minimum, slack * (r.maximum - r.minimum) // want)
            col.no_wrap, col.overflow = False, "fold"
        if not dropped:
            return None
        return (f"   ({len(dropped)} column(s) left out to fit {self.width} columns: {', '.join(dropped)}; "
                "widen the terminal or redirect the output to a file to see them)")


# ---- flag types: each names what it wants; argparse adds the flag's name --------------------

def _flag_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A flag's type from a text parser of :mod:`servelab.policies` (its ValueError names what
    it wants; argparse adds the flag)."""
    def typed(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    typed.__name__ = getattr(parse, "__name__", "value")
    return typed


def _int_at_least(lo: int) -> Callable[[str], int]:
    from servelab.policies import int_in

    return _flag_type(int_in(lo).parse)


def _seconds(positive: bool, allow_inf: bool = False) -> Callable[[str], float]:
    what = "> 0" if positive else ">= 0"

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            v = math.nan
        ok = (v > 0 if positive else v >= 0) and (math.isfinite(v) or (allow_inf and v == math.inf))
        if not ok:
            raise argparse.ArgumentTypeError(f"must be a number of seconds {what}{' (or inf)' if allow_inf else ''}, "
                                             f"got {text!r}")
        return v
    return parse


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a flag's default, except where it has none (its help says what happens then)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        return action.help if action.default is None else super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (no usage block): ``servelab sweep: error: argument --n:
    must be a positive integer, got '0'``."""

    def error(self, message: str) -> NoReturn:
        raise _ParserError(f"{self.prog}: error: {message} (see {self.prog} --help)")


def check_out_dir(path: Path, flag: str = "--out") -> Path:
    """Refuses an output folder that cannot be made or written, before any work: an existing
    file, a path through a file (``/dev/null/x``), a folder without write permission. Makes
    nothing."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UsageError(f"{flag} {str(p)!r} exists and is not a folder")
    existing = p
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{flag} {str(p)!r}: {str(existing)!r} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {str(p)!r}: no permission to write in {str(existing)!r}")
    return p


# ---- servelab demo --------------------------------------------------------------------------

def _demo(args: argparse.Namespace, console: Console) -> int:
    if args.name == "list":
        for name in demos.available():
            console.print(f"{name}  {demos.load(name).TITLE}", highlight=False)
        return 0
    try:
        names = demos.available() if args.name == "all" else [args.name]
        modules = [demos.load(n) for n in names]  # fail on a bad name before running anything
    except ValueError as exc:
        raise UsageError(f"argument name: {exc}") from None
    out_dir = check_out_dir(Path(args.out))
    for module in modules:
        console.rule(f"[bold]{module.TITLE}")
        module.run(out_dir, console)
    return 0


# ---- servelab sweep -------------------------------------------------------------------------

def _grid(args: argparse.Namespace) -> Any:
    """The sweep's grid from the flags, every check naming its flag; counted before it is built."""
    from servelab import sweep as sw
    from servelab.hw_model import DEFAULT_EFFICIENCY
    from servelab.policies import axes as policy_axes

    axes_by_name = policy_axes()
    given = {name: getattr(args, "axis_" + name) for name in axes_by_name}
    for name, values in given.items():
        axis, takers = axes_by_name[name]
        if values is not None and not set(takers) & set(args.policy):
            raise UsageError(f"{axis.option} applies to --policy {' '.join(takers)}, which is not among "
                             f"--policy {' '.join(args.policy)}")
    model, gpu = hardware(args)
    try:
        rates = sw.parse_rates(args.rates, limit=sw.MAX_POINTS)
    except ValueError as exc:  # "rates ..." -> "--rates ..."
        raise UsageError(f"--{exc}") from None
    axes: dict[str, list[Any]] = {}
    for name, values in given.items():
        if values is not None:
            kind = axes_by_name[name][0].kind  # a closed list of texts is read once argparse checked it
            axes[name] = [kind.parse(v) for v in values] if kind.choices else values
    efficiency = _calibrated(args.calibration) if args.calibration else DEFAULT_EFFICIENCY
    try:
        grid = sw.Grid(policies=args.policy, rates=rates, model=model, gpu=gpu, efficiency=efficiency, **axes)
    except ValueError as exc:  # what is left: "model ... does not fit gpu ..."
        raise UsageError(str(exc).replace("model ", "--model ", 1).replace(" gpu ", " --gpu ", 1)) from None
    if len(grid) > sw.MAX_POINTS:
        raise UsageError(f"the grid has {len(grid):,} points ({len(rates)} rates x {len(grid) // len(rates)} "
                         f"configurations), more than {sw.MAX_POINTS:,}: narrow --rates or the parameter lists")
    return grid


def add_hardware_flags(p: argparse.ArgumentParser) -> None:
    """``--model`` and ``--gpu``: a preset of :mod:`servelab.hw_model` or a spec file, as every
    subcommand that prices steps takes them (read back by :func:`hardware`)."""
    from servelab.spec_files import gpu_presets, model_presets

    p.add_argument("--model", default="LLAMA3_8B",
                   help=f"a preset ({', '.join(model_presets())}) or a .toml/.json spec file")
    p.add_argument("--gpu", default="H100", help=f"a preset ({', '.join(gpu_presets())}) or a .toml/.json spec file")


def hardware(args: argparse.Namespace) -> tuple[Any, Any]:
    """The ``(ModelSpec, GpuSpec)`` that ``--model`` and ``--gpu`` name; a bad one is a
    :class:`UsageError` naming its flag."""
    from servelab.spec_files import resolve_gpu, resolve_model

    try:
        return resolve_model(args.model, "--model"), resolve_gpu(args.gpu, "--gpu")
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def _calibrated(path: str) -> Any:
    """``--calibration FILE``: the discounts fitted to the file's measurements (lecture §8.3)."""
    from servelab.hw_model import calibrate
    from servelab.measurement_files import read_measurements

    try:
        return calibrate(read_measurements(path)).efficiency
    except (TypeError, ValueError) as exc:
        raise UsageError(f"--calibration: {exc}") from None


def _sweep(args: argparse.Namespace, console: Console) -> int:
    """``servelab sweep``: the grid from the flags, run with a progress line (servelab.sweep)."""
    from servelab import sweep as sw
    from servelab.metrics import SLO

    grid = _grid(args)
    out_dir = check_out_dir(Path(args.out))
    slo = SLO(args.slo_ttft, args.slo_tpot)
    total = len(grid)
    what = f"simulating {total:,} points x {args.n} requests on {args.jobs} job(s)"
    t0 = time.perf_counter()
    if console.is_terminal:
        from rich.progress import Progress

        with Progress(console=console, transient=True) as bar:
            task = bar.add_task(what, total=total)
            result = sw.sweep(grid, n=args.n, seed=args.seed, slo=slo, jobs=args.jobs,
                              progress=lambda done, _total: bar.update(task, completed=done))
    else:  # piped: one line to start, one at each quarter
        console.print(f"{what}...", highlight=False)
        marks = {math.ceil(total * q / 4) for q in (1, 2, 3)}

        def report(done: int, _total: int) -> None:
            if done in marks:
                console.print(f"   {done:,}/{total:,} points done", highlight=False)
        result = sw.sweep(grid, n=args.n, seed=args.seed, slo=slo, jobs=args.jobs, progress=report)
    console.print(f"{total:,} points in {time.perf_counter() - t0:.1f} s", highlight=False)
    console.print(sw.table(result))
    written = result.write(out_dir, args.format, plots=False)
    if not args.no_plots:
        with demos.working(console, "drawing the plots"):
            plots = result.write_plots(out_dir)
        written += plots
        if len(plots) < 2:
            console.print("   (a plot with no finite value to show was not drawn)", highlight=False)
    for path in written:
        console.print(f"wrote {path}", highlight=False)
    return 0


def _add_sweep_parser(sub: Any) -> None:
    from servelab import lecture
    from servelab import sweep as sw
    from servelab.policies import axes as policy_axes

    p = sub.add_parser("sweep", help="simulate a grid of policies x parameters x arrival rates",
                       description="Simulates demo 03's chat workload at every point of a grid of policies x "
                                   "parameters x arrival rates; writes a table, sweep.csv, sweep.json and plots.",
                       formatter_class=_HelpFormatter)
    p.add_argument("--policy", nargs="+", default=["batch1", "static"], choices=sorted(sw.POLICIES),
                   help="scheduling policies")
    p.add_argument("--rates", nargs="+", default=["0.1:1.0:0.1"],
                   help=f"arrival rates in req/s: numbers or start:stop:step (at most {sw.MAX_POINTS:,} points)")
    add_hardware_flags(p)
    for axis, takers in policy_axes().values():  # every policy's axes (servelab.policies)
        kind = ({"choices": list(axis.kind.choices)} if axis.kind.choices
                else {"type": _flag_type(axis.kind.parse), "metavar": axis.name.upper()})
        p.add_argument(axis.option, dest="axis_" + axis.name, nargs="+", **kind,  # type: ignore[arg-type]
                       help=f"{', '.join(takers)}: {axis.help} ({axis.shown_default()} if not given)")
    p.add_argument("--n", type=_int_at_least(1), default=lecture.N_REQUESTS, help="requests per point")
    p.add_argument("--seed", type=_int_at_least(0), default=lecture.SEED, help="workload seed")
    p.add_argument("--slo-ttft", type=_seconds(positive=True, allow_inf=True), default=lecture.LECTURE_SLO.ttft_s, help="SLO on TTFT, s")
    p.add_argument("--slo-tpot", type=_seconds(positive=True, allow_inf=True), default=lecture.LECTURE_SLO.tpot_s, help="SLO on TPOT, s")
    p.add_argument("--jobs", type=_int_at_least(1), default=1, help="points run at once on local cores")
    p.add_argument("--out", default="out/sweep", help="folder for sweep.csv, sweep.json and the plots")
    p.add_argument("--format", nargs="+", default=["csv", "json"], choices=["csv", "json"], help="data files")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--calibration", metavar="FILE",
                   help="a .csv or .toml of measured step times: price steps with the discounts fitted to them")
    p.set_defaults(func=_sweep)


def build_parser() -> argparse.ArgumentParser:
    from servelab import __version__

    parser = _Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    demo = sub.add_parser("demo", help="run one of the lecture's demos",
                          formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    demo.add_argument("name", help="demo number (01, 02, ...), 'all' or 'list'")
    demo.add_argument("--out", default="out", help="folder for plots")
    demo.set_defaults(func=_demo)
    _add_sweep_parser(sub)
    from servelab.trace.command import add_trace_parser
    add_trace_parser(sub, check_out_dir)
    from servelab.validation.command import add_validate_parser
    add_validate_parser(sub, check_out_dir)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; returns the exit status (0, 1 for a failure while working, 2 for a
    bad flag) instead of raising, except for ``--help`` and ``--version`` (argparse's exit 0)."""
    command = PROG
    try:
        args = build_parser().parse_args(argv)
        command = f"{PROG} {args.command}"
        console = Console()
        return int(args.func(args, console))
    except _ParserError as exc:
        print(exc, file=sys.stderr)
        return 2
    except UsageError as exc:
        print(f"{command}: error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # a check inside the library that the flags missed
        if os.environ.get("SERVELAB_DEBUG"):
            raise
        print(f"{command}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # disk full, permission changed mid-run ...
        print(f"{command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
