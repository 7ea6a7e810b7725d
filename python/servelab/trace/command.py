"""``servelab trace``: record one run and write ``trace.html`` and ``trace.json`` (registered by
:mod:`servelab.cli`, which prints a ``ValueError`` raised here as one line with exit status 2).

    servelab trace --out out/trace                       # the simulator on demo 03's workload
    servelab trace --engine --out out/trace-engine       # the engine on tiny_llm, real tokens
    servelab trace --engine --prefix-caching --out out/trace-prefix
    servelab trace --prefix-caching --speculate 4 --policy chunked --out out/trace-all
    servelab trace --policy chunked --rate 32 --n 120 --gpu A100_80GB

Every size is checked before any work: more than ``MAX_SIM_REQUESTS`` (simulator) or
``MAX_ENGINE_REQUESTS`` (engine) requests are refused, since the page draws every step.

>>> _number(int, 1)("0")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: must be an integer >= 1, got '0'
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any, Callable

from servelab import lecture
from servelab.trace.runs import (ENGINE_DEFAULTS, MAX_ENGINE_REQUESTS, MAX_SIM_REQUESTS,
                                 SIM_DEFAULTS)

__all__ = ["add_trace_parser", "POLICIES"]

POLICIES = ("continuous", "chunked")  # continuous batching, and with chunked prefill


def _number(kind: type, lo: float, strict: bool = False) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            v = math.nan
        if not (math.isfinite(v) and (v > lo if strict else v >= lo)):
            raise argparse.ArgumentTypeError(f"must be a{'n integer' if kind is int else ' number'} "
                                             f"{'>' if strict else '>='} {lo:g}, got {text!r}")
        return v
    return parse


def add_trace_parser(sub: Any, check_out_dir: Callable[[Path], Path]) -> None:
    """The ``trace`` subcommand on ``sub`` (argparse's subparsers); ``check_out_dir`` refuses an
    unusable ``--out`` before any work (the CLI's own check)."""
    from servelab.spec_files import gpu_presets, model_presets

    p = sub.add_parser("trace", help="record one run step by step: trace.html and trace.json",
                       description="Records one continuous-batching run step by step and writes "
                                   "trace.html (a self-contained page: open it offline) and "
                                   "trace.json (Chrome trace format, for Perfetto).",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--engine", action="store_true",
                   help="the engine on tiny_llm with real tokens instead of the simulator")
    p.add_argument("--policy", default="continuous", choices=POLICIES,
                   help="continuous batching, or with chunked prefill")
    p.add_argument("--rate", type=_number(float, 0, strict=True),
                   help=f"arrival rate, req/s (simulator {SIM_DEFAULTS['rate']:g}, "
                        f"engine {ENGINE_DEFAULTS['rate']:g})")
    p.add_argument("--n", type=_number(int, 1),
                   help=f"requests (simulator {SIM_DEFAULTS['n']}, at most {MAX_SIM_REQUESTS}; "
                        f"engine {ENGINE_DEFAULTS['n']}, at most {MAX_ENGINE_REQUESTS})")
    p.add_argument("--seed", type=_number(int, 0), default=lecture.SEED, help="workload seed")
    p.add_argument("--prefix-caching", action="store_true",
                   help="shared system prompts before the prompts, their KV blocks reused")
    p.add_argument("--host-blocks", type=_number(int, 0), default=0,
                   help="with --prefix-caching: a host tier of this many blocks")
    p.add_argument("--speculate", type=_number(int, 0), default=0, metavar="K",
                   help="simulator: speculative decoding, K guesses of a Llama-3.2-1B draft a step")
    p.add_argument("--acceptance", type=_number(float, 0), default=0.8,
                   help="with --speculate: the chance that each guess is kept, in [0, 1]")
    p.add_argument("--num-blocks", type=_number(int, 1),
                   help=f"KV blocks (simulator {SIM_DEFAULTS['num_blocks']}, "
                        f"engine {ENGINE_DEFAULTS['num_blocks']}: small, so that preemption shows)")
    p.add_argument("--block-size", type=_number(int, 1), help="tokens a KV block holds")
    p.add_argument("--max-num-seqs", type=_number(int, 1), help="seats")
    p.add_argument("--max-num-batched-tokens", type=_number(int, 1), help="token budget of a step")
    p.add_argument("--model", default="LLAMA3_8B",
                   help=f"the priced model: a preset ({', '.join(model_presets())}) or a spec file")
    p.add_argument("--gpu", default="H100",
                   help=f"a preset ({', '.join(gpu_presets())}) or a .toml/.json spec file")
    p.add_argument("--slo-ttft", type=_number(float, 0, strict=True),
                   default=lecture.LECTURE_SLO.ttft_s, help="SLO on TTFT, s (marks misses)")
    p.add_argument("--slo-tpot", type=_number(float, 0, strict=True),
                   default=lecture.LECTURE_SLO.tpot_s, help="SLO on TPOT, s")
    p.add_argument("--out", default="out/trace", help="folder for trace.html and trace.json")
    p.set_defaults(func=lambda args, console: _trace(args, console, check_out_dir))


def _trace(args: argparse.Namespace, console: Any, check_out_dir: Callable[[Path], Path]) -> int:
    from servelab.spec_files import resolve_gpu, resolve_model
    from servelab.trace.files import write_trace
    from servelab.trace.runs import engine_chat, simulate_chat

    engine = args.engine
    limit = MAX_ENGINE_REQUESTS if engine else MAX_SIM_REQUESTS
    defaults = ENGINE_DEFAULTS if engine else SIM_DEFAULTS
    what = "the engine" if engine else "the simulator"
    if args.n is not None and args.n > limit:
        raise ValueError(f"--n {args.n}: {what} is traced for at most {limit} requests (the page "
                         f"draws every step); for large runs use `servelab sweep`")
    if engine and args.speculate:
        raise ValueError("--speculate is traced on the simulator: drop --engine (the engine's "
                         "speculation needs a draft model of tiny_llm's)")
    if args.acceptance > 1:
        raise ValueError(f"--acceptance must be in [0, 1], got {args.acceptance:g}")
    if args.host_blocks and not args.prefix_caching:
        raise ValueError(f"--host-blocks {args.host_blocks} needs --prefix-caching")
    model = resolve_model(args.model, "--model")
    gpu = resolve_gpu(args.gpu, "--gpu")
    out = check_out_dir(Path(args.out))
    kw: dict[str, Any] = {k: (getattr(args, k) if getattr(args, k) is not None else defaults[k])
          for k in ("n", "rate", "num_blocks", "block_size", "max_num_seqs",
                    "max_num_batched_tokens")}
    kw.update(seed=args.seed, model=model, gpu=gpu, chunked_prefill=args.policy == "chunked")
    console.print(f"tracing {what}: {kw['n']} requests at {kw['rate']:g} req/s, "
                  f"{kw['num_blocks']} KV blocks of {kw['block_size']} tokens...", highlight=False)
    if engine:
        trace = engine_chat(prefix_caching=args.prefix_caching, host_blocks=args.host_blocks, **kw)
    else:
        from servelab.continuous_options import Speculation
        from servelab.hw_model import LLAMA32_1B

        spec = Speculation(args.speculate, LLAMA32_1B, args.acceptance) if args.speculate else None
        trace = simulate_chat(prefix_caching=args.prefix_caching, host_blocks=args.host_blocks,
                              speculative=spec, **kw)
    features = (", prefix caching" if args.prefix_caching else "") + \
        (f", host tier of {args.host_blocks} blocks" if args.host_blocks else "") + \
        (f", speculation k={args.speculate} a={args.acceptance:g}" if args.speculate else "")
    title = (f"{'engine on tiny_llm' if engine else 'simulator'}: {kw['n']} chat requests at "
             f"{kw['rate']:g} req/s, {args.policy}{features}")
    paths = write_trace(trace, out, title, ttft_s=args.slo_ttft, tpot_s=args.slo_tpot)
    steps = trace.steps
    console.print(f"{len(steps):,} steps, largest batch {max((len(s.batch) for s in steps), default=0)}"
                  f", longest queue {max((len(s.waiting) for s in steps), default=0)}, "
                  f"{trace.num_preemptions} preemptions, "
                  f"{len(trace.slo_misses(args.slo_ttft, args.slo_tpot))} SLO misses",
                  highlight=False)
    for path in paths:
        console.print(f"wrote {path}", highlight=False)
    return 0
