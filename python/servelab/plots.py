"""Plots written to PNG files (never a window: the Agg backend), one function per figure.

Every figure says what its data says: titles state facts computed from the arrays plotted
(a peak, a ratio, the last rate within an SLO), never a fixed slogan; axes carry units; every
series has a legend entry, a marker and a line style of its own, so that none hides another
(two series with exactly the same values are drawn once, under both names); log axes read in
plain decimals (0.2, not 2x10^-1). A figure with no finite value to show is not written.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")  # files only: demos must run on a headless CI machine
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.axis import Axis  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from servelab import hw_model as hw  # noqa: E402

Curve = tuple[np.ndarray, np.ndarray]  # (x, y) of one series
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
_LINES = ("-", "--", "-.", ":")
_TITLE_WIDTH = 70  # characters per title line


def _save(fig: plt.Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, dpi=120, bbox_inches="tight", format="png")
    plt.close(fig)
    tmp.replace(path)  # atomic: a crash never leaves a half-written PNG behind
    return path


def _plain(v: float, _pos: Any = None) -> str:
    """A tick label in plain decimals: 0.2, 5, 1000 (never 2x10^-1 or 1e3)."""
    if v == 0 or not math.isfinite(v):
        return "0" if v == 0 else ""
    return np.format_float_positional(float(v), precision=6, trim="-")


def _num(v: float) -> str:
    """A number for a title: three significant digits, in plain decimals (1,940 not 1.94e+03)."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _style(i: int) -> dict[str, Any]:
    """Series ``i``'s look: colour, marker and line style all change with ``i``, and markers are
    open and shrink, so a series drawn over an earlier one leaves the earlier one visible."""
    return dict(color=f"C{i % 10}", marker=_MARKERS[i % len(_MARKERS)], linestyle=_LINES[i % len(_LINES)],
                markersize=8.5 - 1.0 * (i % 5), markerfacecolor="none", markeredgewidth=1.4, linewidth=1.4)


def _finite(curves: Mapping[str, Curve], positive: bool = False) -> dict[str, Curve]:
    """Each series without its non-finite points (and non-positive ones for a log axis); a
    series left empty is dropped."""
    out = {}
    for label, (x, y) in curves.items():
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        keep = np.isfinite(x) & np.isfinite(y) & ((y > 0) if positive else True)
        if keep.any():
            out[label] = (x[keep], y[keep])
    return out


def _merge_identical(curves: Mapping[str, Curve]) -> dict[str, Curve]:
    """Series with exactly the same points become one series named after all of them: drawn
    twice, the second would hide the first completely."""
    groups: list[tuple[list[str], Curve]] = []
    for label, (x, y) in curves.items():
        for names, (gx, gy) in groups:
            if gx.shape == x.shape and np.array_equal(gx, x) and np.array_equal(gy, y):
                names.append(label)
                break
        else:
            groups.append(([label], (x, y)))
    return {" = ".join(names): xy for names, xy in groups}


def _scale(axis: Axis, values: np.ndarray, ratio: float = 10.0) -> None:
    """Log scale when the values span ``ratio`` or more, linear otherwise; ticks in plain
    decimals either way, at the values themselves when a linear axis has a dozen or fewer."""
    v = np.unique(values[np.isfinite(values)])
    pos = v[v > 0]
    ax = axis.axes
    if pos.size and pos.max() / pos.min() >= ratio:
        kw: dict[str, Any] = {}
        if (v <= 0).any():  # a log axis cannot show 0: symlog keeps it, linear below the smallest
            kw = dict(linthresh=float(pos.min()))
        (ax.set_xscale if axis is ax.xaxis else ax.set_yscale)("symlog" if kw else "log", **kw)
        decades = math.log10(pos.max() / pos.min())
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades <= 3 else (1.0,)))
        axis.set_minor_formatter(NullFormatter())
    elif v.size <= 12:
        axis.set_ticks(v)
    axis.set_major_formatter(FuncFormatter(_plain))


def _title(ax: Axes, head: str, fact: str) -> None:
    ax.set_title("\n".join([head] + textwrap.wrap(fact, _TITLE_WIDTH)), fontsize=9, loc="left")


def _panel(ax: Axes, curves: dict[str, Curve], ylabel: str, xlabel: str) -> None:
    for i, (label, (x, y)) in enumerate(curves.items()):
        # a marker on every point of a long series would be a smear; about 20 say the same
        ax.plot(x, y, label=label, zorder=3 + i, markevery=max(1, len(x) // 20), **_style(i))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7, ncol=1 if len(curves) <= 6 else 2)
    ax.grid(True, which="major", alpha=0.3)


def _all(curves: Mapping[str, Curve], k: int) -> np.ndarray:
    return np.concatenate([c[k] for c in curves.values()]) if curves else np.array([])


def _rate(r: float) -> str:
    return _plain(r)


def within_slo_fact(curves: Mapping[str, Curve], limit: float, what: str) -> str:
    """For each series, the highest rate up to which every point stays within ``limit``.

    >>> c = {"a": (np.array([1.0, 2.0, 3.0]), np.array([0.5, 0.9, 4.0])), "b": (np.array([1.0]), np.array([2.0]))}
    >>> within_slo_fact(c, 1.0, "P99 TTFT")
    'P99 TTFT within the 1 s SLO up to: a 2 req/s; at no rate: b'
    """
    ok, never = [], []
    for label, (x, y) in curves.items():
        good = y <= limit
        n_ok = len(good) if good.all() else int(np.argmin(good))
        (ok.append(f"{label} {_rate(x[n_ok - 1])}") if n_ok else never.append(label))
    parts = [f"{what} within the {limit:g} s SLO up to: " + (", ".join(ok) + " req/s" if ok else "none")]
    if never and ok:
        parts.append("at no rate: " + ", ".join(never))
    return "; ".join(parts)


def peak_fact(curves: Mapping[str, Curve], what: str, unit: str) -> str:
    """Each series' maximum and where it is reached.

    >>> peak_fact({"a": (np.array([1.0, 2.0]), np.array([0.3, 0.1]))}, "goodput peaks", "req/s")
    'goodput peaks: a 0.3 req/s (rate 1)'
    """
    items = [f"{label} {_num(y.max())} {unit} (rate {_rate(x[int(np.argmax(y))])})" for label, (x, y) in curves.items()]
    return f"{what}: " + ", ".join(items)


# ---- demo 01 ------------------------------------------------------------------------------

def tokens_processed(path: Path, curves: Mapping[str, Curve]) -> Path | None:
    """Cumulative tokens processed against output tokens, one series per way of generating
    (with and without the KV cache, §2.2); the title gives the totals and their ratio."""
    data = _finite(curves, positive=True)
    if not data:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    _panel(ax, _merge_identical(data), "tokens processed, cumulative (tokens)", "output tokens generated (tokens)")
    _scale(ax.yaxis, _all(data, 1))
    totals = {k: float(y[-1]) for k, (x, y) in data.items()}
    hi, lo = max(totals, key=totals.get), min(totals, key=totals.get)  # type: ignore[arg-type]
    ratio = totals[hi] / totals[lo]
    _title(ax, f"Demo 01: tokens processed for {int(_all(data, 0).max())} output tokens",
           ", ".join(f"{k}: {v:,.0f}" for k, v in totals.items()) + f" ({ratio:.0f}x)")
    return _save(fig, path)


# ---- demo 02 ------------------------------------------------------------------------------

def roofline(path: Path, gpus: Sequence[hw.GpuSpec],
             points: Sequence[tuple[str, float, float]]) -> Path:
    """The roofline of each GPU (§3.2) with labelled workload points.

    ``points`` holds ``(label, intensity FLOP/byte, achieved FLOP/s)`` for the first GPU.
    """
    fig, ax = plt.subplots(figsize=(7, 4.5))
    x = np.logspace(-1, 5, 400)
    for i, gpu in enumerate(gpus):
        style = dict(_style(i), marker=None)
        line, = ax.plot(x, np.minimum(gpu.peak_flops, gpu.hbm_bandwidth * x) / 1e12,
                        label=f"{gpu.name} roof (ridge {gpu.ridge_point:.0f} FLOP/byte)", **style)
        ax.axvline(gpu.ridge_point, color=line.get_color(), linestyle=":", linewidth=0.8)
    xs = np.array([p[1] for p in points])
    ys = np.array([p[2] for p in points]) / 1e12
    ax.plot(xs, ys, "o", color="black", linestyle="none", label=f"workloads on {gpus[0].name}")
    for label, intensity, flops in points:
        ax.annotate(label, (intensity, flops / 1e12), textcoords="offset points", xytext=(5, -12), fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(FuncFormatter(_plain))
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("attainable compute (TFLOP/s)")
    k = int(np.argmin(xs))
    ridge = gpus[0].ridge_point
    _title(ax, f"Roofline (§3.2), {len(points)} workloads priced on {gpus[0].name}",
           f"{points[k][0]} runs at {_num(xs[k])} FLOP/byte, {ridge / xs[k]:.0f}x below the ridge point "
           f"({ridge:.0f}); {points[int(np.argmax(xs))][0]} at {_num(xs.max())}")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="major", alpha=0.3)
    return _save(fig, path)


def decode_batch(path: Path, batch: np.ndarray, step_ms: np.ndarray, tok_per_s: np.ndarray,
                 max_batch: int) -> Path:
    """Decode step time and throughput against batch size, with the KV-memory ceiling (§3.4-3.5)."""
    fig, ax1 = plt.subplots(figsize=(7, 4.5))
    l1, = ax1.plot(batch, step_ms, label="step time (left, ms)", **_style(0))
    ax1.set_xscale("log", base=2)
    ax1.xaxis.set_major_formatter(FuncFormatter(_plain))
    ax1.set_xlabel("batch size (sequences, context 1024)")
    ax1.set_ylabel("step time (ms)", color=l1.get_color())
    ax2 = ax1.twinx()
    l2, = ax2.plot(batch, tok_per_s, label="throughput (right, tokens/s)", **_style(1))
    ax2.set_ylabel("throughput (tokens/s)", color=l2.get_color())
    l3 = ax1.axvline(max_batch, color="red", linestyle=":", label=f"KV memory full: B = {max_batch}")
    ax1.legend(handles=[l1, l2, l3], fontsize=8, loc="upper left")
    _title(ax1, "Decode step against batch size (§3.4-3.5)",
           f"B={batch[0]} -> B={batch[-1]}: step {step_ms[0]:.2f} -> {step_ms[-1]:.2f} ms "
           f"(x{step_ms[-1] / step_ms[0]:.1f}), throughput x{tok_per_s[-1] / tok_per_s[0]:.0f}; "
           f"KV memory stops the batch at {max_batch}")
    return _save(fig, path)


# ---- demo 03 and sweeps -------------------------------------------------------------------

def ttft_vs_rate(path: Path, p50: Mapping[str, Curve], p99: Mapping[str, Curve], slo_ttft_s: float,
                 heading: str) -> Path | None:
    """TTFT P50 (left) and P99 (right) against arrival rate, one series per policy, the SLO as
    a red line (§4.5). Each panel's title says up to which rate each policy stays within the
    SLO. ``heading`` (the workload, model, GPU) tops the figure."""
    left, right = _finite(p50, positive=True), _finite(p99, positive=True)
    if not left and not right:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5), sharex=True, sharey=True, layout="constrained")
    xs, ys = _all({**left, **right}, 0), _all({**left, **right}, 1)
    for ax, data, name in ((axes[0], left, "P50"), (axes[1], right, "P99")):
        _panel(ax, _merge_identical(data), f"TTFT {name} (s)", "arrival rate (requests/s)")
        ax.tick_params(labelleft=True)  # a shared y axis still reads on both panels
        ax.axhline(slo_ttft_s, color="red", linestyle=":", linewidth=1, label="_slo")
        ax.annotate(f"SLO {slo_ttft_s:g} s", (0.01, slo_ttft_s), xycoords=("axes fraction", "data"),
                    textcoords="offset points", xytext=(0, 3), fontsize=8, color="red")
        _title(ax, f"TTFT {name}", within_slo_fact(data, slo_ttft_s, f"{name} TTFT") if data else "no data")
    _scale(axes[0].xaxis, xs)
    _scale(axes[0].yaxis, np.append(ys, slo_ttft_s))
    fig.suptitle(heading, fontsize=10)
    return _save(fig, path)


def goodput_vs_rate(path: Path, goodput: Mapping[str, Curve], throughput: Mapping[str, Curve],
                    heading: str) -> Path | None:
    """Goodput (requests/s meeting the SLO, left) and throughput (requests/s finished, right)
    against arrival rate, one series per policy (§4.4): busy is not the same as useful. Titles
    give each policy's peak."""
    left, right = _finite(goodput), _finite(throughput)
    if not left and not right:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5), sharex=True, sharey=True, layout="constrained")
    for ax, data, name, fact in ((axes[0], left, "goodput", "goodput peaks"),
                                 (axes[1], right, "throughput", "highest throughput")):
        _panel(ax, _merge_identical(data), f"{name} (requests/s)", "arrival rate (requests/s)")
        ax.tick_params(labelleft=True)
        _title(ax, {"goodput": "Goodput: requests/s that meet the SLO",
                    "throughput": "Throughput: requests/s finished"}[name],
               peak_fact(data, fact, "req/s") if data else "no data")
    _scale(axes[0].xaxis, _all({**left, **right}, 0))
    _scale(axes[0].yaxis, _all({**left, **right}, 1), ratio=20.0)
    fig.suptitle(heading, fontsize=10)
    return _save(fig, path)


# ---- demo speculative ---------------------------------------------------------------------

def speculative_speedup(path: Path, predicted: Mapping[str, Mapping[str, Curve]],
                        measured: Mapping[str, Mapping[str, Curve]]) -> Path | None:
    """Speculative decoding against the acceptance rate ``a`` (§8, milestone 4a): tokens per
    target step (left) and paper speed-up over plain decoding (right). ``predicted[panel][k]``
    is a closed-form curve (a line), ``measured[panel][k]`` the runs' points (markers, same
    colour); ``panel`` is ``"tokens"`` or ``"speedup"``. The right title names the best run."""
    pred = {p: _finite(predicted.get(p, {})) for p in ("tokens", "speedup")}
    meas = {p: _finite(measured.get(p, {})) for p in ("tokens", "speedup")}
    if not any(meas.values()):
        return None
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), layout="constrained")
    labels = {"tokens": "emitted per target step (tokens)", "speedup": "speed-up over plain decoding (x)"}
    for ax, panel in zip(axes, ("tokens", "speedup")):
        keys = list(dict.fromkeys([*pred[panel], *meas[panel]]))
        for i, key in enumerate(keys):
            style = _style(i)
            if key in pred[panel]:
                x, y = pred[panel][key]
                ax.plot(x, y, color=style["color"], linestyle=style["linestyle"], linewidth=1.2,
                        label=f"{key}: closed form")
            if key in meas[panel]:
                x, y = meas[panel][key]
                ax.plot(x, y, linestyle="none", label=f"{key}: measured",
                        **{k: v for k, v in style.items() if k not in ("linestyle", "linewidth")})
        ax.set_xlabel("acceptance rate a (kept guesses / judged guesses)")
        ax.set_ylabel(labels[panel])
        ax.legend(fontsize=7, ncol=2)
        ax.grid(True, which="major", alpha=0.3)
        ax.xaxis.set_major_formatter(FuncFormatter(_plain))
        ax.yaxis.set_major_formatter(FuncFormatter(_plain))
    if meas["speedup"]:
        best_key = max(meas["speedup"], key=lambda k: meas["speedup"][k][1].max())
        x, y = meas["speedup"][best_key]
        j = int(np.argmax(y))
        fact = f"best measured: {best_key}, a = {x[j]:.2f}, {_num(y[j])}x; below 1x the draft costs more than it saves"
    else:
        fact = "no data"
    _title(axes[0], "Tokens per target step: (1 - a^(k+1)) / (1 - a) against measured",
           f"{sum(len(c[0]) for c in meas['tokens'].values())} runs of the real tiny model")
    _title(axes[1], "Paper-GPU speed-up", fact)
    axes[1].axhline(1.0, color="red", linestyle=":", linewidth=1)
    return _save(fig, path)
