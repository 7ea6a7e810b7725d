"""Plots written to PNG files (never a window: the Agg backend), one function per figure."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")  # files only: demos must run on a headless CI machine
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from servelab import hw_model as hw  # noqa: E402


def _save(fig: plt.Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, dpi=120, bbox_inches="tight", format="png")
    plt.close(fig)
    tmp.replace(path)  # atomic: a crash never leaves a half-written PNG behind
    return path


def roofline(path: Path, gpus: Sequence[hw.GpuSpec],
             points: Sequence[tuple[str, float, float]]) -> Path:
    """The roofline of each GPU (§3.2) with labelled workload points.

    ``points`` holds ``(label, intensity FLOP/byte, achieved FLOP/s)`` for the first GPU.
    """
    fig, ax = plt.subplots(figsize=(7, 4.5))
    x = np.logspace(-1, 5, 400)
    for gpu in gpus:
        line, = ax.loglog(x, np.minimum(gpu.peak_flops, gpu.hbm_bandwidth * x), label=gpu.name)
        ax.axvline(gpu.ridge_point, color=line.get_color(), linestyle=":", linewidth=0.8)
    for label, intensity, flops in points:
        ax.loglog([intensity], [flops], "o", color="black")
        ax.annotate(label, (intensity, flops), textcoords="offset points", xytext=(5, -12), fontsize=8)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("attainable FLOP/s")
    ax.set_title("Roofline: decode sits far left of the ridge point (§3.2; points: H100)")
    ax.legend()
    ax.grid(True, which="major", alpha=0.3)
    return _save(fig, path)


def decode_batch(path: Path, batch: np.ndarray, step_ms: np.ndarray, tok_per_s: np.ndarray,
                 max_batch: int) -> Path:
    """Decode step time and throughput against batch size, with the KV-memory ceiling (§3.4-3.5)."""
    fig, ax1 = plt.subplots(figsize=(7, 4.5))
    ax1.plot(batch, step_ms, "o-", color="tab:blue")
    ax1.set_xscale("log", base=2)
    ax1.set_xlabel("batch size (sequences, context 1024)")
    ax1.set_ylabel("step time (ms)", color="tab:blue")
    ax2 = ax1.twinx()
    ax2.plot(batch, tok_per_s, "s--", color="tab:orange")
    ax2.set_ylabel("throughput (tokens/s)", color="tab:orange")
    ax1.axvline(max_batch, color="red", linestyle=":")
    ax1.annotate(f"KV memory full: B = {max_batch}", (max_batch, float(np.max(step_ms))),
                 textcoords="offset points", xytext=(-130, -20), fontsize=8, color="red")
    ax1.set_title("Batching amortises the weight read; KV memory caps the batch")
    return _save(fig, path)


def ttft_vs_rate(path: Path, rates: Sequence[float], curves: dict[str, tuple[np.ndarray, np.ndarray]],
                 slo_ttft_s: float) -> Path:
    """TTFT P50 (solid) and P99 (dashed) against arrival rate, one colour per policy: the
    queueing "hockey stick" of §4.5."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, (p50, p99) in curves.items():
        line, = ax.plot(rates, p50, "o-", label=f"{label} P50")
        ax.plot(rates, p99, "s--", color=line.get_color(), alpha=0.7, label=f"{label} P99")
    ax.axhline(slo_ttft_s, color="red", linestyle=":", linewidth=1)
    ax.annotate(f"SLO {slo_ttft_s:g} s", (rates[0], slo_ttft_s), textcoords="offset points",
                xytext=(0, 4), fontsize=8, color="red")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arrival rate (requests/s)")
    ax.set_ylabel("TTFT (s)")
    ax.set_title("TTFT against load: the hockey stick (§4.5)")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    return _save(fig, path)


def goodput_vs_rate(path: Path, rates: Sequence[float], curves: dict[str, np.ndarray],
                    throughput: dict[str, np.ndarray] | None = None) -> Path:
    """Goodput (requests/s meeting the SLO) against arrival rate, one line per policy (§4.4);
    optionally the raw throughput in requests/s, dotted, to show that busy is not useful."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, g in curves.items():
        line, = ax.plot(rates, g, "o-", label=f"{label} goodput")
        if throughput is not None and label in throughput:
            ax.plot(rates, throughput[label], ":", color=line.get_color(), alpha=0.6,
                    label=f"{label} throughput")
    ax.set_xscale("log")
    ax.set_xlabel("arrival rate (requests/s)")
    ax.set_ylabel("requests/s")
    ax.set_title("Goodput rises, then collapses; throughput keeps rising (§4.4-§4.5)")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    return _save(fig, path)
