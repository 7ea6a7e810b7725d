"""The paper GPU held against published measurements (lecture §8.3): hw_model.MEASURED,
hw_model.calibrate, the measurement files and the sweep's use of a fitted Efficiency.
Cheap: each fit is a few numpy grids over 29 rows (the whole file runs in a few seconds)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from servelab import calibration as cal
from servelab import hw_model as hw
from servelab.measurement_files import measurements_csv, read_measurements
from servelab.sweep import Grid, sweep

# rows never fitted in the held-out check: a third GPU (H200), the Llama-3-70B splits, a large
# batch on an A100, a TP=2 8B and one batch-1 decode from a second source
HELD_OUT = {
    "H200 (FP8)": lambda m: m.gpu.name == "H200 (FP8)",
    "Llama-3-70B TP": lambda m: m.model.name == "Llama-3-70B",
    "A100 batch 60": lambda m: len(m.batch) == 60,
    "Llama-3-8B TP 2": lambda m: m.model.name == "Llama-3-8B" and m.tp == 2,
    "torchao Llama-2-7B": lambda m: m.model.name == "Llama-2-7B" and "torchao" in m.source and m.tp == 1,
}


def test_measured_table_covers_what_it_must():
    rows = hw.MEASURED
    assert len(rows) >= 8 and all(m.source and m.notes for m in rows)
    assert any(m.batch[0][0] > 1 for m in rows) and any(m.batch[0][0] == 1 for m in rows)  # prefill, decode
    assert any(len(m.batch) == 1 for m in rows) and any(len(m.batch) >= 60 for m in rows)
    assert len({m.gpu.name for m in rows}) >= 2 and any(m.tp > 1 for m in rows)
    assert any(m.model.bytes_per_param == 1 for m in rows)
    # the row the lecture's gap is told with: Llama-3.1-8B, batch 1, H100, BF16: 7.88 ms
    first = rows[0]
    assert (first.model, first.gpu, first.tp) == (hw.LLAMA3_8B, hw.H100, 1)
    assert round(first.time_s * 1e3, 2) == 7.88


def test_calibrate_measured_brings_the_mean_error_under_15_percent_and_reports_loo():
    c = hw.calibrate(hw.MEASURED)
    assert c.mape_after <= 0.15 < c.mape_before
    assert np.isfinite(c.loo_mape) and c.loo_mape >= c.mape_after  # a fit flatters the rows it saw
    assert len(c.rows) == len(hw.MEASURED) and c.fit == cal.FIELDS
    assert isinstance(c.efficiency, hw.Efficiency) and c.start == hw.DEFAULT_EFFICIENCY
    # before the fit each row is priced exactly as step_cost prices it under the default discounts
    for m, r in zip(hw.MEASURED[:5], c.rows):
        assert r.before_s == pytest.approx(hw.step_cost(m.model, m.gpu, m.batch, tp=m.tp).time_s, rel=1e-12)
        assert r.after_s == pytest.approx(hw.step_cost(m.model, m.gpu, m.batch, c.efficiency, tp=m.tp).time_s,
                                          rel=1e-12)
    assert "leave-one-out" in c.table() and all(cal.likely_cause(r) for r in c.worst(3))


def test_held_out_measurements_land_within_30_percent():
    held = [m for m in hw.MEASURED if any(f(m) for f in HELD_OUT.values())]
    fitted = [m for m in hw.MEASURED if m not in held]
    assert len(held) >= 6 and all(any(f(m) for m in held) for f in HELD_OUT.values())
    eff = hw.calibrate(fitted).efficiency
    for m in held:
        pred = hw.step_cost(m.model, m.gpu, m.batch, eff, tp=m.tp).time_s
        assert abs(pred - m.time_s) / m.time_s <= 0.30, m.label


def test_fit_recovers_known_discounts_and_only_moves_what_it_fits():
    """Measurements made by the roofline itself under known discounts are fitted back to them
    (a fit that ignored a column, or minimised absolute error, lands elsewhere)."""
    truth = hw.Efficiency(compute=0.55, bandwidth=0.65, overhead_s=1.2e-3)
    rows = [hw.Measurement(m.model, m.gpu, m.batch, hw.step_cost(m.model, m.gpu, m.batch, truth, tp=m.tp).time_s,
                           m.tp) for m in hw.MEASURED]
    got = hw.calibrate(rows).efficiency
    assert (got.compute, got.bandwidth, got.overhead_s) == pytest.approx((0.55, 0.65, 1.2e-3), rel=1e-3)
    only = hw.calibrate(rows, fit="overhead_s").efficiency
    assert (only.compute, only.bandwidth) == (0.70, 0.80) and only.overhead_s > 1.2e-3


def test_fit_minimises_relative_not_absolute_error():
    """With only the overhead free, the optimum of sum(((p + o) / t - 1)**2) has a zero gradient,
    sum(((p + o) / t - 1) / t) = 0; an absolute-error fit (sum(p + o - t) = 0) lands elsewhere,
    pulled by the 400 ms prefills."""
    c = hw.calibrate(hw.MEASURED, fit="overhead_s")
    p = np.array([r.after_s for r in c.rows]) - c.efficiency.overhead_s
    t = np.array([r.measured_s for r in c.rows])
    o = c.efficiency.overhead_s
    assert o > 0 and abs(np.sum(((p + o) / t - 1) / t)) < 1e-6 * np.sum(1 / t)
    assert abs(np.sum(p + o - t)) > 1e-3


def test_leave_one_out_is_a_fit_to_the_others():
    rows = list(hw.MEASURED[:6])
    c = hw.calibrate(rows)
    others = hw.calibrate(rows[:2] + rows[3:]).efficiency
    m = rows[2]
    assert c.rows[2].loo_s == pytest.approx(hw.step_cost(m.model, m.gpu, m.batch, others, tp=m.tp).time_s, rel=1e-12)
    assert np.isnan(hw.calibrate(rows[:1]).loo_mape)  # one row: nothing to leave out


def test_sweep_cli_takes_a_calibration_file(tmp_path, capsys):
    from servelab import cli

    p = tmp_path / "mine.csv"
    p.write_text(measurements_csv([dict(model="LLAMA3_8B", gpu="H100", batch_size=b, new_tokens=n, context_len=c,
                                        time_s=t) for b, n, c, t in ((1, 1, 100, 7.88e-3), (64, 1, 1024, 0.02),
                                                                     (1, 2048, 0, 0.06), (1, 128, 0, 0.012))]))
    out = tmp_path / "out"
    code = cli.main(["sweep", "--policy", "batch1", "--rates", "0.5", "--n", "5", "--no-plots",
                     "--calibration", str(p), "--out", str(out)])
    assert code == 0
    eff = json.loads((out / "sweep.json").read_text())["efficiency"]
    want = hw.calibrate(read_measurements(p)).efficiency
    assert eff == dataclasses.asdict(want) and eff != dataclasses.asdict(hw.DEFAULT_EFFICIENCY)
    p.write_text("model,gpu,batch_size,new_tokens,context_len,time_s\nLLAMA3_8B,H100,1,1,100,0\n")
    capsys.readouterr()
    try:
        code = cli.main(["sweep", "--policy", "batch1", "--rates", "0.5", "--calibration", str(p), "--out", str(out)])
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    assert "--calibration: mine.csv row 1: time_s must be a finite number > 0.0, got 0.0" in capsys.readouterr().err


def test_default_efficiency_is_untouched():
    """The lecture's numbers are priced with DEFAULT_EFFICIENCY (tests/test_hw_lecture_numbers.py):
    calibrating never changes it."""
    hw.calibrate(hw.MEASURED[:4])
    assert hw.DEFAULT_EFFICIENCY == hw.Efficiency(0.70, 0.80, 0.5e-3)
    assert round(hw.step_cost(hw.LLAMA3_8B, hw.H100, [(1, 512)]).time_s * 1e3, 2) == 6.13


@pytest.mark.parametrize("bad, message", [
    (lambda: hw.calibrate([]), "measurements must hold at least one Measurement, got an empty table"),
    (lambda: hw.calibrate([hw.MEASURED[0], "row"]), "measurements[1] must be a servelab.hw_model.Measurement"),
    (lambda: hw.calibrate(hw.MEASURED, fit=("speed",)), "fit must name some of compute, bandwidth, overhead_s"),
    (lambda: hw.Measurement.uniform("LLAMA3_8B", "H100", 1, 1, 100, -1e-3), "time_s must be a finite number > 0.0"),
    (lambda: hw.Measurement.uniform("LLAMA3_8B", "H100", 512, 1, 8192, 0.1), "batch needs the KV of"),
    (lambda: hw.Measurement.uniform("LLAMA3_8B", "H100", 1, 0, 100, 0.1), "batch must hold at least one"),
    (lambda: hw.Measurement.uniform("LLAMA3_8B", "H100", 1, 1, 100, 0.1, tp=3), "tp=3 must divide n_heads=32"),
    (lambda: hw.Measurement.uniform("GPT-5", "H100", 1, 1, 100, 0.1), "model must be a servelab.hw_model.ModelSpec"),
])
def test_bad_input_is_named(bad, message):
    with pytest.raises((ValueError, TypeError)) as info:
        bad()
    assert message in str(info.value)


def test_files_round_trip_and_name_the_bad_row(tmp_path):
    rows = [dict(model="LLAMA3_8B", gpu="H100", tp=1, batch_size=1, new_tokens=1, context_len=100,
                 time_s=7.88e-3, bytes_per_param=2, source="torchao", notes="bf16"),
            dict(model="LLAMA2_70B", gpu="A100_80GB", tp=4, batch_size=1, new_tokens=2048, context_len=0,
                 time_s=0.377, bytes_per_param=1, source="trt", notes="")]
    p = tmp_path / "m.csv"
    p.write_text(measurements_csv(rows))
    got = read_measurements(p)
    assert [(m.model.bytes_per_param, m.tp, len(m.batch), m.time_s) for m in got] == [(2.0, 1, 1, 7.88e-3),
                                                                                     (1.0, 4, 1, 0.377)]
    t = tmp_path / "m.toml"
    t.write_text('[[measurement]]\nmodel = "LLAMA3_8B"\ngpu = "H100"\nbatch_size = 1\nnew_tokens = 1\n'
                 'context_len = 100\ntime_s = 0.00788\n')
    assert read_measurements(t)[0] == dataclasses.replace(got[0], source="", notes="")
    p.write_text(measurements_csv(rows + [dict(rows[0], batch_size=4096, context_len=8192)]))
    with pytest.raises(ValueError, match=r"m.csv row 3: batch needs the KV of"):
        read_measurements(p)
    p.write_text("model,gpu\n")
    with pytest.raises(ValueError, match="no measurements"):
        read_measurements(p)


def test_grid_efficiency_reaches_the_simulator_and_sweep_json():
    slow = hw.Efficiency(compute=0.35, bandwidth=0.40, overhead_s=1e-3)
    base = sweep(Grid(policies=("batch1",), rates=(0.2,)), n=10)
    cal_ = sweep(Grid(policies=("batch1",), rates=(0.2,), efficiency=slow), n=10)
    assert cal_.rows[0].tpot_p50_s > 1.9 * base.rows[0].tpot_p50_s  # half the bandwidth: twice the decode
    assert json.loads(cal_.to_json())["efficiency"] == dataclasses.asdict(slow)
    with pytest.raises(TypeError, match="efficiency must be a servelab.hw_model.Efficiency"):
        Grid(policies=("batch1",), rates=(0.2,), efficiency=0.5)  # type: ignore[arg-type]


def test_demo_prints_every_row_and_the_largest_misses(tmp_path):
    from rich.console import Console

    from servelab.demos import demo_calibration, load

    assert load("calibration") is demo_calibration
    console = Console(record=True, width=200)
    c = demo_calibration.run(tmp_path, console)
    text = console.export_text()
    assert (tmp_path / "demo_calibration.png").stat().st_size > 10_000
    assert all(r.label in text for r in c.rows) and f"{c.loo_mape:.1%}" in text
    worst = c.worst(1)[0]
    assert f"{worst.label} ({worst.error_after:+.0%}): {cal.likely_cause(worst)}" in text
