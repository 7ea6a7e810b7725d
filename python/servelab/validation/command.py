"""``servelab validate``: the simulated clock against measured vLLM runs (registered by
:mod:`servelab.cli`, which prints a ``ValueError`` raised here as one line with exit status 2).

    servelab validate                                   # every shipped run, the paper GPU as is
    servelab validate --calibration fitted              # with the shipped fit
    servelab validate runs/* --model-configs runs/model_configs --json out/v.json --out out/validate
    servelab validate --fit my_fit.json                 # fit a calibration on these runs (minutes)
    servelab validate --leave-one-model-out             # fit without each model, predict it (minutes)

An argument that is an experiment folder (it has ``results/``) is read; a folder holding
experiment folders is read as all of them; anything else (a README, ``model_configs``) is
skipped with a note, so that ``servelab validate DATA/*`` works. Without ``--model-configs``,
the models are those servelab ships and those of any ``model_configs`` folder beside the
experiment folders (the shared data's own layout: ``DATA/model_configs/NAME/config.json``),
which win where both name a model.

>>> from servelab.validation.command import experiment_dirs
>>> from servelab.validation.experiment import shipped_data_dir
>>> dirs, skipped = experiment_dirs([shipped_data_dir() / "README.md", shipped_data_dir()])
>>> len(dirs), [p.name for p in skipped]
(12, ['README.md'])
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from servelab.validation.calibration import FITTED, PAPER, Calibration, load_calibration, save_calibration
from servelab.validation.experiment import Experiment, read_experiment, shipped_experiment_dirs
from servelab.validation.hf_config import ServedModel, read_model_configs, shipped_models
from servelab.validation.report import (OVERLOAD_NOTE, Row, compare, mape, summary_rows, table_rows, write_json,
                                        write_plot)
from servelab.validation.simulate import ExperimentPrediction, model_for, simulate_experiment
from servelab.validation.stats import METRICS

__all__ = ["add_validate_parser", "experiment_dirs", "predict_all"]


def experiment_dirs(paths: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """(experiment folders, skipped paths) of the command's arguments."""
    found: list[Path] = []
    skipped: list[Path] = []
    for p in paths:
        if p.is_dir() and (p / "results").is_dir():
            found.append(p)
        elif p.is_dir() and any((c / "results").is_dir() for c in p.iterdir()):
            found.extend(sorted(c for c in p.iterdir() if (c / "results").is_dir()))
        elif p.exists():
            skipped.append(p)
        else:
            raise ValueError(f"{str(p)!r} does not exist")
    return found, skipped


def models_for(dirs: Sequence[Path], model_configs: str | None) -> dict[str, ServedModel]:
    """The models the experiments in ``dirs`` may serve: ``model_configs``'s when given, else
    the shipped ones updated by every ``model_configs`` folder beside an experiment folder.

    >>> from servelab.validation.experiment import shipped_experiment_dirs
    >>> sorted(models_for(shipped_experiment_dirs(), None))
    ['Llama-2-70b-hf', 'Llama-2-7b-hf', 'Mixtral-8x7B-v0.1']
    """
    if model_configs:
        return read_model_configs(model_configs)
    models = shipped_models()
    for beside in dict.fromkeys(d.parent / "model_configs" for d in dirs):
        if beside.is_dir():
            models.update(read_model_configs(beside))
    return models


def predict_all(experiments: Sequence[Experiment], models: dict[str, ServedModel], calibration: Calibration,
                seed: int = 0) -> list[ExperimentPrediction]:
    """Every experiment simulated with ``calibration``."""
    return [simulate_experiment(e, models, calibration, seed=seed) for e in experiments]


def add_validate_parser(sub: Any, check_out_dir: Callable[..., Path]) -> None:
    """The ``validate`` subcommand on ``sub`` (argparse's subparsers)."""
    p = sub.add_parser("validate", help="predict measured vLLM runs on H100 and say how far off the clock is",
                       description="Simulates measured inference-perf runs of vLLM (servelab's continuous batching, "
                                   "the paper GPU) and prints predicted beside measured TTFT, ITL, TPOT and E2E "
                                   "with the error of each, and the mean absolute error per metric.",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("dirs", nargs="*", metavar="DIR",
                   help="experiment folders, or folders of them (default: the runs servelab ships)")
    p.add_argument("--model-configs", metavar="DIR",
                   help="folder of NAME/config.json (default: the configurations servelab ships, and those of a "
                        "model_configs folder beside the experiment folders)")
    p.add_argument("--calibration", metavar="FILE",
                   help=f"a calibration JSON file, or '{FITTED}' for the shipped fit (default: the paper GPU as is)")
    p.add_argument("--json", metavar="OUT", help="write the records (experiment, stage, metric, predicted, measured)")
    p.add_argument("--out", metavar="PLOTDIR", help="write validate.png (predicted against measured) there")
    p.add_argument("--seed", type=int, default=0, help="workload seed")
    p.add_argument("--fit", metavar="FILE", help="fit a calibration on these runs, write it to FILE and use it")
    p.add_argument("--leave-one-model-out", action="store_true",
                   help="also fit without each model and report that model's held-out errors")
    p.set_defaults(func=lambda args, console: _validate(args, console, check_out_dir))


def _table(console: Any, title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for h in header:
        t.add_column(h)
    for r in rows:
        t.add_row(*r)
    console.print(t)


def _progress(console: Any, what: str) -> Callable[[int, float], None]:
    def report(n: int, loss: float) -> None:
        if n % 25 == 0:
            console.print(f"   {what}: {n} evaluations, loss {loss:.5f}", highlight=False)
    return report


def _validate(args: argparse.Namespace, console: Any, check_out_dir: Callable[..., Path]) -> int:
    from servelab.validation.fit import fit_calibration, leave_one_model_out

    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {args.seed}")
    out = check_out_dir(Path(args.out), "--out") if args.out else None
    if args.json:
        check_out_dir(Path(args.json).parent if str(Path(args.json).parent) else Path("."), "--json")
    if args.fit:
        check_out_dir(Path(args.fit).parent if str(Path(args.fit).parent) else Path("."), "--fit")
    if args.fit and args.calibration:
        raise ValueError("--fit and --calibration: give one (--fit makes the calibration it uses)")
    t0 = time.perf_counter()
    if args.dirs:
        dirs, skipped = experiment_dirs([Path(d) for d in args.dirs])
    else:
        dirs, skipped = shipped_experiment_dirs(), []
    for s in skipped:
        console.print(f"skipped {s} (not an experiment folder)", highlight=False)
    if not dirs:
        raise ValueError("no experiment folder among the arguments (one holds results/stage_N_lifecycle_metrics.json)")
    experiments = [read_experiment(d) for d in dirs]
    models = models_for(dirs, args.model_configs)
    for e in experiments:
        model_for(e, models)  # every model known before any work
    calibration = load_calibration(args.calibration) if args.calibration else PAPER
    if args.fit:
        console.print(f"fitting a calibration on {len(experiments)} experiments...", highlight=False)
        fit = fit_calibration(experiments, models, progress=_progress(console, "fit"))
        calibration = fit.calibration
        console.print(f"wrote {save_calibration(calibration, args.fit)}", highlight=False)
    predictions = predict_all(experiments, models, calibration, args.seed)
    sim_s = time.perf_counter() - t0
    rows = compare(predictions)
    label = "the paper GPU as is" if calibration.is_paper else f"calibration {args.fit or args.calibration}"
    _table(console, f"predicted / measured (error); ms below 1 s; {label}", ["experiment", "stage", *METRICS],
           table_rows(rows))
    names = sorted({r.model for r in rows})
    _table(console, "mean absolute error over the stages not overloaded", ["models", "stages", *METRICS],
           summary_rows(rows, names))
    if any(r.overloaded for r in rows):
        console.print(f"(overloaded) {OVERLOAD_NOTE}.", highlight=False)
    if not calibration.is_paper:
        coeffs = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in calibration.to_dict().items() if k != "note")
        console.print(f"calibration: {coeffs} ({calibration.note})", highlight=False)
    if args.leave_one_model_out:
        _held_out(console, experiments, models, rows, args.seed, leave_one_model_out)
    if args.json:
        console.print(f"wrote {write_json(rows, args.json)}", highlight=False)
    if out is not None:
        plot = write_plot(rows, out / "validate.png", f"servelab vs vLLM on H100 ({label})")
        if plot is not None:
            console.print(f"wrote {plot}", highlight=False)
    console.print(f"{len(experiments)} experiments, {sum(len(e.stages) for e in experiments)} stages simulated in "
                  f"{sim_s:.1f} s", highlight=False)
    sys.stdout.flush()
    return 0


def _held_out(console: Any, experiments: list[Experiment], models: dict[str, ServedModel], rows: list[Row],
              seed: int, leave_one_model_out: Any) -> None:
    """Fits without each model and prints that model's errors beside those of the calibration
    in use (``rows``)."""
    console.print("leave-one-model-out: fitting without each model (minutes)...", highlight=False)
    fits = leave_one_model_out(experiments, models, progress=_progress(console, "fit"))
    table = []
    for name, fit in fits.items():
        own = [e for e in experiments if e.server.model_name == name]
        held = mape(compare(predict_all(own, models, fit.calibration, seed)))
        whole = mape([r for r in rows if r.model == name])
        for label, errs in (("calibration in use", whole), ("held out", held)):
            table.append([name, label] + [f"{errs[m] * 100:.0f}%" if m in errs else "-" for m in METRICS])
    _table(console, "leave-one-model-out: mean absolute error of the left-out model", ["model", "fit", *METRICS],
           table)
