"""Demo: how close is the paper GPU to a real H100 running vLLM? (lecture §8.3)

Every TTFT and TPOT servelab prints is a simulated clock. This demo holds it against measured
serving runs (inference-perf against vLLM on H100: Llama-2-7B on one card, Llama-2-70B on four,
Mixtral-8x7B on two; shipped in ``servelab/data/vllm_h100_inference_perf``, with their source):
the same workload rebuilt, the server as configured simulated, the same statistics. It prints
the error of each metric with the lecture's paper GPU as it is and with the shipped calibration
(``servelab.validation``), the leave-one-model-out errors (each model predicted by a fit that
never saw it), the errors five peer simulators published on the same experiment, and the
overloaded runs apart; it plots predicted against measured (``demo_validation_paper.png``,
``demo_validation_fitted.png``). ``servelab validate`` runs the same comparison on any runs.

>>> [row[0] for row in PEERS]
['BLIS roofline', 'BLIS trained ("evolved")', 'Vidur', 'llm-optimizer', 'AIConfigurator']
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from servelab import plots  # noqa: F401  (sets matplotlib's file-only backend first)
from servelab.demos import table as _table
from servelab.demos import working
from servelab.validation import (PAPER, Experiment, ServedModel, load_calibration, read_experiment,
                                 shipped_experiment_dirs, shipped_models)
from servelab.validation.calibration import COEFFICIENTS, Calibration, fits_dir
from servelab.validation.command import predict_all
from servelab.validation.report import OVERLOAD_NOTE, Row, compare, mape, write_plot

TITLE = "Demo validation: the paper GPU against vLLM on a real H100 (§8.3)"

# Published errors of five simulators on Llama-2-7B, codegen, stage 0 (5 req/s) / stage 1
# (10 req/s): (E2E mean error stage 0, stage 1, TTFT mean error stage 0, stage 1), in percent
PEERS = (
    ("BLIS roofline", 10.7, 14.9, 367, 731),
    ('BLIS trained ("evolved")', 25.6, 14.8, 21.2, 9.0),
    ("Vidur", 14.4, 2.5, 9.5, 15.3),
    ("llm-optimizer", 42.5, 32.0, 168, 810),
    ("AIConfigurator", 15.4, 11.0, 128, 876),
)
PEER_EXPERIMENT = "20260217-155451-llama-2-7b-tp1-codegen"
SHOWN = ("ttft_mean", "ttft_p90", "itl_mean", "e2e_mean", "e2e_p90")
MEANING = {
    "compute": "fraction of peak FLOP/s the kernels reach",
    "bandwidth": "fraction of HBM bandwidth the kernels reach",
    "step_overhead_s": "seconds every step costs beyond the roofline (launches, CPU)",
    "layer_s": "seconds every step costs per layer of the model (its kernels' floors)",
    "per_seq_s": "seconds a step costs per sequence in it",
    "allreduce": "how tensor parallelism's all-reduce runs: a ring, or one-shot (vLLM's, small tensors)",
    "hop_latency_s": "all-reduce: fixed seconds a hop",
    "link_efficiency": "all-reduce: fraction of NVLink bandwidth reached",
    "admission_lag_steps": "steps a new request waits beyond the next step boundary",
    "frontend_s": "API server and network seconds per request",
}


def _pct(x: float) -> str:
    return f"{x * 100:.0f}%"


def part1_summary(console: Console, rows_by: dict[str, list[Row]], models: list[str]) -> None:
    t = _table("1. Mean absolute error over the stages not overloaded", "clock", "model", *SHOWN)
    for label, rows in rows_by.items():
        for name in ["all", *models]:
            errs = mape([r for r in rows if name == "all" or r.model == name])
            t.add_row(label, name, *[_pct(errs[m]) if m in errs else "-" for m in SHOWN])
    console.print(t)


def part2_coefficients(console: Console, fitted: Calibration) -> None:
    t = _table(f"2. The calibration ({fitted.note})", "coefficient", "paper GPU", "fitted", "meaning")
    def shown(v: object) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    for k in COEFFICIENTS:
        t.add_row(k, shown(getattr(PAPER, k)), shown(getattr(fitted, k)), MEANING[k])
    console.print(t)


def part3_held_out(console: Console, experiments: list[Experiment], models: dict[str, ServedModel],
                   fitted_rows: list[Row]) -> None:
    t = _table("3. Leave-one-model-out: each model predicted by a fit that never saw it", "model", "fit", *SHOWN)
    for name in sorted({e.server.model_name for e in experiments}):
        path = fits_dir() / f"without-{name}.json"
        if not path.is_file():
            continue
        own = [e for e in experiments if e.server.model_name == name]
        held = mape(compare(predict_all(own, models, load_calibration(path))))
        whole = mape([r for r in fitted_rows if r.model == name])
        t.add_row(name, "fitted on all", *[_pct(whole[m]) for m in SHOWN])
        t.add_row(name, "held out", *[_pct(held[m]) for m in SHOWN])
    console.print(t)


def part4_peers(console: Console, rows_by: dict[str, list[Row]]) -> None:
    t = _table(f"4. The peers' published errors on the same experiment ({PEER_EXPERIMENT})", "simulator",
               "E2E mean s0", "E2E mean s1", "TTFT mean s0", "TTFT mean s1")
    for name, e0, e1, t0, t1 in PEERS:
        t.add_row(name, f"{e0:g}%", f"{e1:g}%", f"{t0:g}%", f"{t1:g}%")
    for label, rows in rows_by.items():
        err = {(r.stage, r.metric): abs(r.error) for r in rows if r.experiment == PEER_EXPERIMENT}
        t.add_row(f"servelab, {label}", *[f"{err[(s, m)] * 100:.1f}%" for m in ("e2e_mean", "ttft_mean")
                                          for s in (0, 1)])
    console.print(t)
    console.print("   Measured there: E2E mean 1.81 s / 2.22 s, TTFT mean 25.0 ms / 29.5 ms.", highlight=False)


def part5_overloaded(console: Console, rows: list[Row]) -> None:
    t = _table("5. Overloaded runs (not in any mean above): predicted / measured", "experiment", "ttft_mean",
               "itl_mean", "e2e_mean")
    over: dict[str, dict[str, Row]] = {}
    for r in rows:
        if r.overloaded:
            over.setdefault(r.experiment, {})[r.metric] = r
    for exp, by in over.items():
        t.add_row(exp, *[f"{by[m].predicted:.3g} / {by[m].measured:.3g} s" for m in ("ttft_mean", "itl_mean",
                                                                                       "e2e_mean")])
    console.print(t)
    console.print(f"   {OVERLOAD_NOTE}.", highlight=False)


def run(out_dir: Path, console: Console) -> None:
    experiments = [read_experiment(d) for d in shipped_experiment_dirs()]
    models = shipped_models()
    fitted = load_calibration("fitted")
    with working(console, "simulating 12 measured runs twice (paper GPU, fitted)"):
        rows_by = {"paper GPU": compare(predict_all(experiments, models, PAPER)),
                   "fitted": compare(predict_all(experiments, models, fitted))}
    names = sorted({e.server.model_name for e in experiments})
    part1_summary(console, rows_by, names)
    part2_coefficients(console, fitted)
    with working(console, "predicting each model with the fit that left it out"):
        part3_held_out(console, experiments, models, rows_by["fitted"])
    part4_peers(console, rows_by)
    part5_overloaded(console, rows_by["fitted"])
    for label, rows in rows_by.items():
        key = "paper" if label == "paper GPU" else label
        path = write_plot(rows, Path(out_dir) / f"demo_validation_{key}.png",
                          f"servelab vs vLLM on H100: {label}")
        if path is not None:
            console.print(f"wrote {path}", highlight=False)
