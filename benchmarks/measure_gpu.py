"""Times forward steps of a random-weight model of a ModelSpec's shape on a real GPU, and writes
them as the CSV that ``servelab.measurement_files`` reads (lecture §8.3: fit the paper GPU to
your own card). Optional: it needs torch with CUDA, downloads nothing, and neither ``make test``
nor ``make bench`` runs it (``benchmarks/__main__`` runs only ``bench_*.py``).

    python -m benchmarks.measure_gpu --model LLAMA3_8B --gpu H100 --out my_h100.csv
    python -m benchmarks.measure_gpu --model LLAMA2_7B --gpu A100_80GB --decode 1 16 64 --context 512 \\
        --prefill 128 2048 --out my_a100.csv

Then fit and use it::

    servelab sweep --calibration my_h100.csv ...          # every point priced with the fit
    python -c "from servelab import hw_model as hw; from servelab.measurement_files import \\
        read_measurements; print(hw.calibrate(read_measurements('my_h100.csv')).table())"

Each step is a Llama-style forward (embedding rows, per layer RMSNorm, Q/K/V/O projections with
GQA, attention over a random KV cache, SwiGLU MLP; final norm and LM head on the last token of
each sequence), BF16, one card, CUDA-event timed: the median of ``--repeats`` after warm-up.
Plain eager PyTorch, so expect it slower than a compiled engine (launch gaps: the overhead term).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path


def _layers(spec, torch, device):  # random weights of the spec's shape, scaled to keep values finite
    g = torch.Generator(device=device).manual_seed(0)

    def w(*shape):
        return (torch.randn(*shape, generator=g, device=device, dtype=torch.bfloat16) * shape[-1] ** -0.5)

    q, kv = spec.n_heads * spec.d_head, spec.n_kv_heads * spec.d_head
    layers = [dict(wqkv=w(q + 2 * kv, spec.d_model), wo=w(spec.d_model, q), w13=w(2 * spec.d_ff, spec.d_model),
                   w2=w(spec.d_model, spec.d_ff)) for _ in range(spec.n_layers)]
    return layers, w(spec.vocab_size, spec.d_model), w(spec.vocab_size, spec.d_model)


def _step(spec, torch, weights, batch, new_tokens, context_len, device):
    """A closure running one forward of ``batch`` sequences x ``new_tokens`` on ``context_len``."""
    F = torch.nn.functional
    layers, emb, head = weights
    q_dim, kv_dim = spec.n_heads * spec.d_head, spec.n_kv_heads * spec.d_head
    ids = torch.randint(0, spec.vocab_size, (batch, new_tokens), device=device)
    total = context_len + new_tokens
    caches = [(torch.randn(batch, spec.n_kv_heads, total, spec.d_head, device=device, dtype=torch.bfloat16),
               torch.randn(batch, spec.n_kv_heads, total, spec.d_head, device=device, dtype=torch.bfloat16))
              for _ in layers]
    rep = spec.n_heads // spec.n_kv_heads
    causal = new_tokens > 1 and context_len == 0  # a prompt from scratch; decode attends to all

    def attend(q, k, v):
        try:  # torch >= 2.5 reads each KV head once for its group of query heads (GQA)
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=rep > 1)
        except TypeError:  # older torch: copy each KV head for its group (more HBM traffic)
            if rep > 1:
                k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def norm(x):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype)

    def run():
        x = emb[ids]
        for lw, (kc, vc) in zip(layers, caches):
            qkv = norm(x) @ lw["wqkv"].T
            qh, k, v = qkv.split([q_dim, kv_dim, kv_dim], dim=-1)
            kc[:, :, context_len:] = k.reshape(batch, new_tokens, spec.n_kv_heads, spec.d_head).transpose(1, 2)
            vc[:, :, context_len:] = v.reshape(batch, new_tokens, spec.n_kv_heads, spec.d_head).transpose(1, 2)
            qh = qh.reshape(batch, new_tokens, spec.n_heads, spec.d_head).transpose(1, 2)
            att = attend(qh, kc, vc)
            x = x + att.transpose(1, 2).reshape(batch, new_tokens, q_dim) @ lw["wo"].T
            a, b = (norm(x) @ lw["w13"].T).chunk(2, dim=-1)
            x = x + (F.silu(a) * b) @ lw["w2"].T
        return norm(x[:, -1]) @ head.T
    return run


def time_step(torch, run, repeats: int) -> float:
    """Median seconds of ``run()`` over ``repeats``, CUDA-event timed after three warm-ups."""
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.measure_gpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="LLAMA3_8B", help="a servelab.hw_model preset or spec file")
    p.add_argument("--gpu", default="H100", help="the preset (or spec file) of the card it runs on")
    p.add_argument("--decode", type=int, nargs="*", default=[1, 8, 32, 64], help="decode batch sizes")
    p.add_argument("--context", type=int, default=1024, help="cached tokens per sequence for decode steps")
    p.add_argument("--prefill", type=int, nargs="*", default=[128, 512, 2048], help="prompt lengths (batch 1)")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--out", default="measured.csv")
    args = p.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("measure_gpu needs torch (pip install torch); nothing was measured", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("measure_gpu needs a CUDA GPU; nothing was measured", file=sys.stderr)
        return 2
    from servelab.measurement_files import measurements_csv
    from servelab.spec_files import resolve_gpu, resolve_model

    spec, gpu = resolve_model(args.model, "--model"), resolve_gpu(args.gpu, "--gpu")
    device = torch.device("cuda")
    weights = _layers(spec, torch, device)
    name = torch.cuda.get_device_name(device)
    shapes = [(b, 1, args.context) for b in args.decode] + [(1, n, 0) for n in args.prefill]
    rows = []
    with torch.inference_mode():
        for b, n, c in shapes:
            t = time_step(torch, _step(spec, torch, weights, b, n, c, device), args.repeats)
            print(f"batch {b} x {n} new on {c} cached: {t * 1e3:.2f} ms", flush=True)
            rows.append(dict(model=args.model, gpu=args.gpu, tp=1, batch_size=b, new_tokens=n, context_len=c,
                             time_s=t, bytes_per_param=2, source=f"benchmarks/measure_gpu.py on {name}",
                             notes=f"eager PyTorch {torch.__version__}, BF16, random weights, median of {args.repeats}"))
            torch.cuda.empty_cache()
    Path(args.out).write_text(measurements_csv(rows), encoding="utf-8")
    print(f"wrote {args.out} ({len(rows)} rows; model {spec.name}, priced as {gpu.name})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
