"""Demo: the paper GPU held against real ones (lecture §8.3, pitfall 10).

The roofline with the lecture's discounts (70% of peak FLOP/s, 80% of HBM bandwidth, 0.5 ms a
step) prices 29 published step times (``hw_model.MEASURED``: gpt-fast, torchao and TensorRT-LLM
on A100, H100 and H200; decode and prefill, batch 1 to 128, 1 to 8 cards, 16- and 8-bit
weights). ``hw_model.calibrate`` fits the three discounts to them; the demo prints every row's
error before and after, the leave-one-out error, the likely cause of the largest misses, and
plots measured against predicted (``demo_calibration.png``).

>>> len(hw.MEASURED), len({m.gpu.name for m in hw.MEASURED}), max(m.tp for m in hw.MEASURED)
(29, 4, 8)
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from servelab import hw_model as hw
from servelab import plots  # noqa: F401  (sets matplotlib's file-only backend first)
from servelab.calibration import Calibration, likely_cause
from servelab.demos import table as _table

TITLE = "Demo calibration: the paper GPU against published measurements (§8.3)"


def part1_rows(console: Console, c: Calibration) -> None:
    t = _table("1. Every measurement: ms a step, measured and predicted", "measurement", "measured",
               "default", "fitted", "err default", "err fitted", "err LOO")
    for r in c.rows:
        t.add_row(r.label, f"{r.measured_s * 1e3:.2f}", f"{r.before_s * 1e3:.2f}", f"{r.after_s * 1e3:.2f}",
                  f"{r.error_before:+.0%}", f"{r.error_after:+.0%}", f"{r.error_loo:+.0%}")
    console.print(t)


def part2_fit(console: Console, c: Calibration) -> None:
    d, e = c.start, c.efficiency
    t = _table("2. The discounts, the lecture's and fitted", "", "compute", "bandwidth", "overhead ms",
               "mean |error|")
    t.add_row("lecture (default)", f"{d.compute:.2f}", f"{d.bandwidth:.2f}", f"{d.overhead_s * 1e3:.2f}",
              f"{c.mape_before:.1%}")
    t.add_row("fitted", f"{e.compute:.2f}", f"{e.bandwidth:.2f}", f"{e.overhead_s * 1e3:.2f}",
              f"{c.mape_after:.1%}")
    t.add_row("leave-one-out", "", "", "", f"{c.loo_mape:.1%}")
    console.print(t)
    console.print("   Leave-one-out predicts each row from a fit to the others: the error to expect on a "
                  "measurement the fit has not seen.", highlight=False)


def part3_causes(console: Console, c: Calibration) -> None:
    console.print("3. The largest misses after the fit, and what the roofline leaves out there:", highlight=False)
    for r in c.worst(3):
        console.print(f"   {r.label} ({r.error_after:+.0%}): {likely_cause(r)}", highlight=False)


def plot(path: Path, c: Calibration) -> Path:
    """Measured against predicted ms, before and after the fit, log-log with the diagonal."""
    import matplotlib.pyplot as plt

    meas = [r.measured_s * 1e3 for r in c.rows]
    fig, ax = plt.subplots(figsize=(6.4, 5.2))
    ax.scatter(meas, [r.before_s * 1e3 for r in c.rows], marker="o", facecolors="none", edgecolors="C0",
               label=f"lecture's discounts (mean |error| {c.mape_before:.0%})")
    ax.scatter(meas, [r.after_s * 1e3 for r in c.rows], marker="s", color="C1",
               label=f"fitted (mean |error| {c.mape_after:.0%}, leave-one-out {c.loo_mape:.0%})")
    lo, hi = min(meas) / 1.5, max(meas) * 1.5
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="predicted = measured")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured ms a step",
           ylabel="predicted ms a step")
    worst = c.worst(1)[0]
    ax.set_title(f"{len(c.rows)} published steps; largest miss after the fit {worst.error_after:+.0%}",
                 fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, dpi=120, bbox_inches="tight", format="png")
    plt.close(fig)
    tmp.replace(path)  # atomic: never a half-written PNG
    return path


def run(out_dir: Path, console: Console) -> Calibration:
    c = hw.calibrate(hw.MEASURED)
    part1_rows(console, c)
    part2_fit(console, c)
    part3_causes(console, c)
    png = plot(Path(out_dir) / "demo_calibration.png", c)
    console.print(f"   plot: {png}", highlight=False)
    return c
