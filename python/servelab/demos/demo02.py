"""Demo 02: the roofline, on a paper H100 and on this machine's CPU (lecture §3).

Parts: (1) GPUs and ridge points, (2) model ledgers, (3) prefill sweep 1..32K,
(4) decode batch sweep at context 1024, (5) context sweep 512..32K, (6) a real CPU measurement
of the same effect with numpy. Plots: ``demo02_roofline.png``, ``demo02_decode_batch.png``.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from servelab import hw_model as hw
from servelab import plots
from servelab.demos import table as _table, working
from servelab.hw_model import H100, LLAMA3_8B

TITLE = "Demo 02: the roofline, and why decode wastes the GPU (§3)"

MODEL, GPU = LLAMA3_8B, H100
PREFILL_LENGTHS = [1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
DECODE_BATCHES = [1, 8, 16, 32, 64, 128, 256, 512]
CONTEXTS = [512, 1024, 2048, 4096, 8192, 16384, 32768]
CPU_ROWS = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def part1_gpus(console: Console) -> None:
    """§3.1: two numbers per GPU, and their ratio."""
    eff = hw.DEFAULT_EFFICIENCY
    t = _table("1. GPUs on paper (BF16 dense)", "GPU", "TFLOP/s", "HBM TB/s", "memory GB",
               "ridge FLOP/B", "ridge at 70%/80%")
    for g in hw.GPUS.values():
        t.add_row(g.name, f"{g.peak_flops / 1e12:.0f}", f"{g.hbm_bandwidth / 1e12:.3g}",
                  f"{g.memory_bytes / 1e9:.0f}", f"{g.ridge_point:.0f}",
                  f"{g.ridge_point * eff.compute / eff.bandwidth:.0f}")
    console.print(t)


def part2_ledger(console: Console) -> None:
    """§2.4, §3.5: parameters, weights, KV per token, and how much KV fits on one H100."""
    t = _table("2. Model ledger (on one H100, mem_util 0.9)", "model", "params (B)", "weights GB",
               "KV/token KiB", "KV of 128K ctx GB", "KV capacity tokens", "max batch @1024")
    for m in hw.MODELS.values():
        t.add_row(m.name, f"{m.param_count / 1e9:.2f}", f"{m.weight_bytes / 1e9:.2f}",
                  f"{m.kv_bytes_per_token / 1024:.0f}", f"{m.kv_bytes_per_token * 131072 / 1e9:.1f}",
                  f"{hw.kv_capacity_tokens(m, GPU):,}", f"{hw.max_batch(m, GPU, 1024):,}")
    console.print(t)
    console.print("   Llama-3-70B does not fit one H100 at all: its weights alone exceed 80 GB.")


def part3_prefill(console: Console) -> list[tuple[str, float, float]]:
    """§3.3: prefill time is flat (weight read) until ~the ridge point, then linear in length."""
    t = _table(f"3. Prefill of one prompt, {MODEL.name} on {GPU.name}", "tokens", "time ms",
               "per token us", "FLOP/byte", "bound", "MFU")
    points = []
    for n in PREFILL_LENGTHS:
        s = hw.prefill_cost(MODEL, GPU, n)
        t.add_row(f"{n:,}", f"{s.time_s * 1e3:.2f}", f"{s.time_s / n * 1e6:.1f}", f"{s.intensity:.1f}",
                  s.bound, f"{s.mfu:.1%}")
        if n in (256, 2048):
            points.append((f"prefill {n}", s.intensity, s.flops / s.time_s))
    console.print(t)
    return points


def part4_decode(console: Console, out_dir: Path) -> tuple[list[tuple[str, float, float]], Path]:
    """§3.4-3.5: batching amortises the weight read, until KV memory runs out."""
    ctx = 1024
    cap = hw.max_batch(MODEL, GPU, ctx)
    b = np.array(DECODE_BATCHES)
    c = hw.decode_step_costs(MODEL, GPU, b, np.full_like(b, ctx))
    tok_s = b / c.time_s
    t = _table(f"4. Decode step, context {ctx}", "batch", "step ms", "tokens/s", "x batch 1",
               "per token us", "KV share of bytes", "MFU", "fits in HBM")
    points = []
    for i, batch in enumerate(DECODE_BATCHES):
        t.add_row(str(batch), f"{c.time_s[i] * 1e3:.2f}", f"{tok_s[i]:,.0f}", f"{tok_s[i] / tok_s[0]:.1f}",
                  f"{c.time_s[i] / batch * 1e6:.0f}", f"{c.kv_bytes[i] / c.bytes_moved[i]:.0%}",
                  f"{c.mfu[i]:.1%}", "yes" if batch <= cap else f"[red]no (max {cap})[/red]")
        if batch in (1, 64, 256):
            points.append((f"decode B={batch}", float(c.intensity[i]), float(c.flops[i] / c.time_s[i])))
    console.print(t)
    # the plot runs up to the largest batch that fits
    b_plot = np.array(sorted({int(x) for x in b if x <= cap} | {cap}))
    c_plot = hw.decode_step_costs(MODEL, GPU, b_plot, np.full_like(b_plot, ctx))
    png = plots.decode_batch(out_dir / "demo02_decode_batch.png", b_plot, c_plot.time_s * 1e3,
                             b_plot / c_plot.time_s, cap)
    return points, png


def part5_context(console: Console) -> None:
    """§3.5: long contexts cut both the step speed and the batch that fits."""
    ctx = np.array(CONTEXTS)
    batch = np.array([hw.max_batch(MODEL, GPU, int(x)) for x in ctx])
    c = hw.decode_step_costs(MODEL, GPU, batch, ctx)
    tok_s = batch / c.time_s
    t = _table("5. Decode at the largest batch that fits, by context", "context", "max batch",
               "step ms", "max tokens/s", "vs context 512")
    for i, x in enumerate(CONTEXTS):
        t.add_row(f"{x:,}", str(batch[i]), f"{c.time_s[i] * 1e3:.2f}", f"{tok_s[i]:,.0f}",
                  f"1/{tok_s[0] / tok_s[i]:.0f}" if i else "1")
    console.print(t)


def _median_time(fn, repeats: int) -> float:
    fn()  # warm-up: page in the matrix, pick the BLAS kernel
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def part6_cpu(console: Console, seed: int = 0, repeats: int = 5) -> None:
    """§3.6: the same story on this CPU, measured (times vary by machine and load)."""
    with working(console, f"measuring (T x 4096) @ (4096 x 4096) matmuls on this CPU for part 6, "
                          f"{len(CPU_ROWS) + 2} cases x {repeats} runs (20-40 s)"):
        t, separate, batched = _measure_cpu(seed, repeats)
    console.print(t)
    console.print(f"   32 separate vector-matrix products: {separate * 1e3:.1f} ms; one batched "
                  f"product: {batched * 1e3:.1f} ms; batching is {separate / batched:.1f}x faster "
                  "(the matrix is read once instead of 32 times).")


def _measure_cpu(seed: int, repeats: int) -> tuple[Table, float, float]:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((4096, 4096), dtype=np.float32)  # 67 MB: far bigger than CPU caches
    t = _table("6. This CPU: (T x 4096) @ (4096 x 4096) FP32, measured", "rows T", "time ms",
               "GFLOP/s", "us per row")
    for rows in CPU_ROWS:
        x = rng.standard_normal((rows, 4096), dtype=np.float32)
        s = _median_time(lambda: x @ w, repeats)
        t.add_row(str(rows), f"{s * 1e3:.2f}", f"{2 * rows * 4096 * 4096 / s / 1e9:.1f}", f"{s / rows * 1e6:.0f}")
    xs = rng.standard_normal((32, 4096), dtype=np.float32)
    separate = _median_time(lambda: [xs[i:i + 1] @ w for i in range(32)], repeats)
    batched = _median_time(lambda: xs @ w, repeats)
    return t, separate, batched


def run(out_dir: Path, console: Console) -> None:
    part1_gpus(console)
    part2_ledger(console)
    points = part3_prefill(console)
    decode_points, decode_png = part4_decode(console, out_dir)
    part5_context(console)
    part6_cpu(console)
    roofline_png = plots.roofline(out_dir / "demo02_roofline.png", [GPU, hw.A100_80GB],
                                  points + decode_points)
    console.print(f"   plots: {roofline_png}, {decode_png}")
