"""Demo 04: Clockwork and predictability (lecture §5, SPEC.md §3).

Part 1 (§5.4) times the real tiny model on this CPU (``tiny_llm.SMALL``: d_model 256, 4
layers): the same forward shape run again and again varies by a few percent, whole requests
vary as much as their output lengths do, and a line ``time = a + b * output_len`` fitted to the
requests predicts each one closely. The unpredictability of an LLM request comes from not
knowing how long it will run, not from the computation.

Parts 2 and 3 (a CNN-era server with early rejection; an LLM at batch 1 with admission by
estimated length) run on the serving simulator and join this demo when it exists.

Timings are measurements of this machine at this moment and change from run to run; the tests
check the code (``servelab.timing``) on synthetic data, never these numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from servelab import tiny_llm
from servelab.timing import coefficient_of_variation, fit_affine, median_relative_error, time_calls
from servelab.tiny_llm import KVCache, ModelConfig, TinyLLM

TITLE = "Demo 04: Clockwork and predictability (§5)"

# Output lengths of the timed requests: lognormal, median 48 tokens, sigma 0.7 (a chat-like
# spread: most requests short, a few several times longer), clipped to [4, 256], seed 0.
OUTPUT_MEDIAN, OUTPUT_SIGMA, OUTPUT_MIN, OUTPUT_MAX = 48, 0.7, 4, 256


@dataclass(frozen=True)
class ShapeTiming:
    """Repeated forwards of one shape: ``new_tokens`` on top of ``context_len`` cached."""

    label: str
    new_tokens: int
    context_len: int
    times_s: np.ndarray

    @property
    def cv(self) -> float:
        return coefficient_of_variation(self.times_s)


@dataclass(frozen=True)
class RequestTiming:
    """Whole requests (prefill + decodes) of varying output length, and the line fitted."""

    prompt_len: int
    output_lens: np.ndarray
    times_s: np.ndarray
    a: float  # seconds
    b: float  # seconds per output token

    @property
    def cv(self) -> float:
        return coefficient_of_variation(self.times_s)

    @property
    def output_len_cv(self) -> float:
        return coefficient_of_variation(self.output_lens)

    @property
    def fit_error(self) -> float:
        """Median relative error of ``a + b * output_len`` against the measured times."""
        return median_relative_error(self.output_lens, self.times_s, self.a, self.b)


@dataclass(frozen=True)
class Part1:
    config: ModelConfig
    shapes: list[ShapeTiming]
    requests: RequestTiming


def output_lengths(n: int, seed: int = 0) -> np.ndarray:
    """``n`` output lengths drawn as the module constants say.

    >>> output_lengths(5).tolist()
    [52, 44, 75, 52, 33]
    """
    rng = np.random.default_rng(seed)
    lens = np.round(OUTPUT_MEDIAN * np.exp(OUTPUT_SIGMA * rng.standard_normal(n)))
    return np.clip(lens, OUTPUT_MIN, OUTPUT_MAX).astype(np.int64)


def _time_shape(model: TinyLLM, label: str, n: int, context: int, repeat: int,
                rng: np.random.Generator) -> ShapeTiming:
    cache = KVCache(model.config)
    if context:
        model.forward(rng.integers(0, model.config.vocab_size, context), cache)
    tokens = rng.integers(0, model.config.vocab_size, n)
    times = time_calls(lambda: model.forward(tokens, cache), repeat,
                       before=lambda: cache.truncate(context))  # same shape every time
    return ShapeTiming(label, n, context, times)


def part1(config: ModelConfig = tiny_llm.SMALL, *, repeat: int = 100, n_requests: int = 24,
          request_repeat: int = 2, prompt_len: int = 16, seed: int = 0) -> Part1:
    """Time one decode shape and one prefill shape ``repeat`` times each, then
    ``n_requests`` whole greedy requests (each the best of ``request_repeat`` runs), and fit
    ``time = a + b * output_len``."""
    model = TinyLLM(config)
    rng = np.random.default_rng(seed)
    shapes = [_time_shape(model, "decode: 1 token @ context 64", 1, 64, repeat, rng),
              _time_shape(model, f"prefill: {2 * prompt_len} tokens", 2 * prompt_len, 0, repeat,
                          rng)]
    lens = output_lengths(n_requests, seed)
    times = np.empty(n_requests)
    tiny_llm.generate(rng.integers(0, config.vocab_size, prompt_len), 8, model=model)  # warm-up
    for i, n_out in enumerate(lens):
        prompt = rng.integers(0, config.vocab_size, prompt_len)
        # best of `request_repeat`: a request's own time, less what other processes took
        times[i] = time_calls(lambda: tiny_llm.generate(prompt, int(n_out), model=model),
                              repeat=request_repeat, warmup=0).min()
    a, b = fit_affine(lens, times)
    return Part1(config, shapes, RequestTiming(prompt_len, lens, times, a, b))


def _print_part1(console: Console, p: Part1) -> None:
    cfg = p.config
    console.print(f"Model: {cfg.name}, d_model {cfg.d_model}, {cfg.n_layers} layers, "
                  f"{cfg.param_count:,} parameters, FP32, on this CPU (one BLAS thread).\n")
    table = Table(title="Part 1a: the same forward shape, run again and again")
    for col in ("shape", "runs", "median ms", "P99 ms", "CV"):
        table.add_column(col, justify="right", no_wrap=True)
    for s in p.shapes:
        table.add_row(s.label, str(len(s.times_s)), f"{np.median(s.times_s) * 1e3:.3f}",
                      f"{np.percentile(s.times_s, 99) * 1e3:.3f}", f"{s.cv:.1%}")
    console.print(table)

    r = p.requests
    table = Table(title=f"Part 1b: {len(r.times_s)} whole requests, prompt {r.prompt_len} "
                        "tokens, output lengths lognormal (best of 2 runs each)")
    table.add_column("", justify="right", no_wrap=True)
    table.add_column("value", justify="right", no_wrap=True)
    table.add_row("output length: min / median / max",
                  f"{r.output_lens.min()} / {np.median(r.output_lens):.0f} / {r.output_lens.max()}")
    table.add_row("output length CV", f"{r.output_len_cv:.0%}")
    table.add_row("request time: min / median / max (ms)",
                  f"{r.times_s.min() * 1e3:.0f} / {np.median(r.times_s) * 1e3:.0f} / "
                  f"{r.times_s.max() * 1e3:.0f}")
    table.add_row("request time CV", f"{r.cv:.0%}")
    table.add_row("fit: time = a + b * output_len",
                  f"a = {r.a * 1e3:.2f} ms, b = {r.b * 1e3:.3f} ms/token")
    table.add_row("fit: median relative error", f"{r.fit_error:.1%}")
    console.print(table)
    decode = p.shapes[0]
    console.print(
        f"Measured: the same decode shape varies by {decode.cv:.0%} (CV), whole requests by "
        f"{r.cv:.0%}, and knowing each request's output length, a straight line predicts its "
        f"time to within {r.fit_error:.0%} (median). Clockwork's premise (§5.2) is that one "
        "forward of a fixed shape takes the same time every run; a request does not, because "
        "its time is set by its output length, which nobody knows in advance. The lecture's "
        "quiet laptop saw a few % per shape, 68% per request and about 5% fit error; other "
        "processes sharing these cores spread every number here.\n")


def run(out_dir: Path, console: Console) -> None:
    _print_part1(console, part1())
    console.print("Parts 2 and 3 (early rejection, admission by estimated length) need the "
                  "serving simulator and are not here yet.")
