"""``servelab trace`` and its recorder (servelab.trace): the recorded steps agree with the run's
own results (the Rust simulator's times and batches, the engine's tokens and times), the Rust
per-step loop's record and the Python twin's are the same trace, the
recorder adds nothing to a run it watches, the KV and queue bookkeeping adds up at every step,
the Chrome trace has one complete event per step with the step's duration, the page embeds
everything and loads nothing, and the command refuses a large run before any work. (The pages
in a real browser: tests/test_trace_browser.py; the a8 failure page: test_trace_failure_page.py.)
About 15 s on one core."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from servelab import lecture
from servelab.cli import main
from servelab.engine import Engine
from servelab.hw_model import DEFAULT_EFFICIENCY
from servelab.serving_core import run_continuous_batching
from servelab.trace import (StepRecorder, chrome_trace, engine_chat, from_engine_result,
                            render_page, run_data, simulate_chat)
from servelab.trace.runs import simulate
from servelab.trace.record import MAX_TRACE_STEPS
from servelab.workload import Requests, chat_requests

SIM = dict(n=30, rate=24.0, num_blocks=384)  # a small run with a queue and preemptions


@pytest.fixture(scope="module")
def sim():
    return simulate_chat(**SIM)


@pytest.fixture(scope="module")
def eng():
    return engine_chat(n=10, prefix_caching=True)


def test_the_simulator_trace_shows_batching_queueing_and_preemption(sim):
    assert max(len(s.batch) for s in sim.steps) > 1
    assert max(len(s.waiting) for s in sim.steps) > 0
    assert sim.num_preemptions > 0
    assert any(k == "recompute" for s in sim.steps for k in s.kinds)


def test_simulator_times_equal_the_rust_simulators(sim):
    rust = run_continuous_batching(chat_requests(SIM["n"], SIM["rate"], lecture.SEED),
                                   lecture.MODEL, lecture.GPU, num_blocks=SIM["num_blocks"],
                                   **{k: lecture.CONTINUOUS[k] for k in ("max_num_seqs",
                                      "max_num_batched_tokens", "block_size")})
    assert [r.first_token_s for r in sim.requests] == rust.first_token_s.tolist()
    assert [r.finish_s for r in sim.requests] == rust.finish_s.tolist()
    assert [r.preemptions for r in sim.requests] == rust.n_preemptions.tolist()
    assert len(sim.steps) == rust.n_steps


def _twin(requests, **limits):
    from servelab.reference.continuous import run_continuous_batching as twin

    rec = StepRecorder(num_blocks=limits["num_blocks"], block_size=limits["block_size"],
                       token_budget=limits["max_num_batched_tokens"],
                       max_num_seqs=limits["max_num_seqs"])
    twin(requests, lecture.MODEL, lecture.GPU, DEFAULT_EFFICIENCY, recorder=rec, **limits)
    return rec.trace("simulator")


# many decoders of one-token blocks in a pool with no slack: a step preempts several at once
CROWD = Requests(np.array([0.0192, 0.0325, 0.0343, 0.0344, 0.049, 0.0499]),
                 np.array([3, 2, 3, 1, 2, 3]), np.array([10, 7, 6, 5, 6, 7]))
CROWD_LIMITS = dict(num_blocks=13, block_size=1, max_num_seqs=6, max_num_batched_tokens=64,
                    chunked_prefill=False)


@pytest.mark.parametrize("case", ["chat", "crowd", "chunked"])
def test_the_rust_record_and_the_python_twins_are_the_same_trace(sim, case):
    # one recorder, two simulators: the Rust per-step loop's queues (read by runs._read_steps)
    # and the Python twin calling the recorder itself give the very same steps and requests
    if case == "chat":
        limits = {k: lecture.CONTINUOUS[k] for k in ("max_num_seqs", "max_num_batched_tokens",
                                                     "block_size")}
        limits.update(num_blocks=SIM["num_blocks"], chunked_prefill=False)
        python, rust = _twin(chat_requests(SIM["n"], SIM["rate"], lecture.SEED), **limits), sim
    elif case == "crowd":
        python = _twin(CROWD, **CROWD_LIMITS)
        rust = simulate(CROWD, model=lecture.MODEL, gpu=lecture.GPU, **CROWD_LIMITS)
        assert max(len(s.preempted) for s in rust.steps) > 1
    else:  # chunked prefill: a long prompt's chunks over several steps
        limits = dict(CROWD_LIMITS, block_size=2, num_blocks=24, max_num_batched_tokens=4,
                      chunked_prefill=True)
        python = _twin(CROWD, **limits)
        rust = simulate(CROWD, model=lecture.MODEL, gpu=lecture.GPU, **limits)
        # a later chunk of a prompt: a prefill entry on top of computed tokens
        assert any(k == "prefill" and c > 0 for s in rust.steps for (_, _, c), k in zip(s.batch, s.kinds))
    assert len(python.steps) == len(rust.steps)
    for a, b in zip(python.steps, rust.steps):
        assert a == b, a.index
    assert python.requests == rust.requests


@pytest.mark.parametrize("chunked", [False, True])
def test_a_simulator_trace_with_every_feature_is_the_simulators_run(chunked):
    """Prefix caching, a host tier and speculation on the simulator's page: the recorded
    requests have the run's times, each finishes with all its tokens (a decode entry that kept
    guesses samples several), and kept guesses and cache hits both show."""
    from servelab.continuous_options import Speculation
    from servelab.hw_model import LLAMA32_1B
    from servelab.trace.runs import SYSTEM_LEN
    from servelab.workload import chat_sessions

    spec = Speculation(4, LLAMA32_1B, 0.8)
    limits = dict(num_blocks=700, max_num_seqs=32, max_num_batched_tokens=2048, block_size=16,
                  chunked_prefill=chunked)
    t = simulate_chat(n=40, rate=24.0, prefix_caching=True, host_blocks=64, speculative=spec, **limits)
    reqs, shared = chat_sessions(40, 24.0, lecture.SEED, system_len=SYSTEM_LEN)
    rust = run_continuous_batching(reqs, lecture.MODEL, lecture.GPU, prefix_caching=True, shared_prefixes=shared,
                                   host_blocks=64, speculative=spec, **limits)
    assert [r.first_token_s for r in t.requests] == rust.first_token_s.tolist()
    assert [r.finish_s for r in t.requests] == rust.finish_s.tolist()
    assert [r.generated for r in t.requests] == reqs.output_len.tolist()
    assert len(t.steps) == rust.n_steps and rust.prefix_hits > 0 and rust.spec_accepted.sum() > 0
    assert t.config["prefix_caching"] and t.config["speculative_k"] == 4
    decodes = [n for s in t.steps for (_, n, _), k in zip(s.batch, s.kinds) if k == "decode"]
    assert max(decodes) > 1
    cached = [c for s in t.steps for (_, _, c), k in zip(s.batch, s.kinds) if k == "prefill"]
    assert max(cached) >= SYSTEM_LEN - 16  # a prompt's first piece starts past the shared blocks


def test_every_step_adds_up(sim):
    cfg = sim.config
    arrived = set()
    for s in sim.steps:
        assert s.blocks_used + s.free_blocks == cfg["num_blocks"]
        assert sum(b for b, _ in s.kv.values()) == s.blocks_used  # nothing shared here
        assert set(s.kv) == set(s.running)  # a waiting request holds no block
        assert sum(n for _, n, _ in s.batch) <= cfg["token_budget"]
        assert len(s.batch) <= cfg["max_num_seqs"]
        assert s.prefill_tokens + s.decode_tokens == sum(n for _, n, _ in s.batch)
        arrived |= set(s.waiting) | set(s.running) | set(s.finished)
        assert not set(s.waiting) & set(s.running)
        # a decode is one token after the request's computed ones (rule 2)
        assert all(n == 1 for (_, n, _), k in zip(s.batch, s.kinds) if k == "decode")
    assert arrived == {r.request_id for r in sim.requests}
    assert sim.steps[-1].blocks_used == 0 and not sim.steps[-1].running


def test_steps_follow_one_another_on_the_clock(sim):
    for a, b in zip(sim.steps, sim.steps[1:]):
        assert b.index == a.index + 1
        assert b.start_s >= a.start_s + a.dur_s  # the clock may jump over an idle gap, never back


def test_engine_trace_holds_the_engines_tokens_and_times(eng):
    assert all(r.status == "finished" for r in eng.requests)
    assert all(r.generated == r.max_new_tokens for r in eng.requests)
    assert all(len(r.text) > 0 and r.prompt_text for r in eng.requests)
    assert max(s.shared_blocks for s in eng.steps) > 0  # the system prompt's blocks
    for s in eng.steps:
        assert s.blocks_used + s.free_blocks == eng.config["num_blocks"]
        assert s.shared_blocks <= s.blocks_used
        assert s.cached_free_blocks <= s.free_blocks
        # counted once per request holding it, a shared block is counted at least twice
        assert sum(b for b, _ in s.kv.values()) - sum(sh for _, sh in s.kv.values()) \
            + s.shared_blocks <= s.blocks_used


def test_the_host_tier_shows_in_an_engine_trace():
    t = engine_chat(n=12, prefix_caching=True, host_blocks=8, num_blocks=12)
    assert t.config["host_blocks"] == 8
    assert 0 < max(s.host_blocks_used for s in t.steps) <= 8


def _engine(recorder=None):
    e = Engine(num_blocks=8, block_size=4, max_num_seqs=3, max_num_batched_tokens=64,
               recorder=recorder)
    rng = np.random.default_rng(1)
    for i in range(6):
        e.add_request(rng.integers(0, 256, int(rng.integers(3, 14))).tolist(),
                      int(rng.integers(4, 12)), arrival_step=i // 2)
    return e


def test_the_recorder_changes_nothing_and_a_replay_records_the_same_steps():
    plain = _engine().run()
    rec = StepRecorder(num_blocks=8, block_size=4, token_budget=64, max_num_seqs=3)
    watched_engine = _engine(rec)
    watched = watched_engine.run()
    assert watched.batch_log() == plain.batch_log() and watched.tokens() == plain.tokens()
    live = rec.trace("engine")
    assert any(s.preempted for s in live.steps)
    assert [r.first_token_s for r in live.requests] == [r.first_token_s for r in plain.requests]
    assert [r.finish_s for r in live.requests] == [r.finish_s for r in plain.requests]
    prompts = [len(r.request.prompt) for r in watched_engine._live]
    replay = from_engine_result(plain, prompts, num_blocks=8, block_size=4, token_budget=64,
                                max_num_seqs=3)
    fields = ("index", "start_s", "dur_s", "batch", "kinds", "admitted", "preempted",
              "finished", "waiting", "running", "blocks_used", "free_blocks")
    assert [[getattr(s, f) for f in fields] for s in replay.steps] == \
        [[getattr(s, f) for f in fields] for s in live.steps]
    # without prefix caching, the blocks read from the slots are the allocator's own
    assert [s.kv for s in replay.steps] == [s.kv for s in live.steps]


def test_a_replay_with_prefix_caching_leaves_the_blocks_per_request_out():
    # which blocks are shared is not in an EngineResult: the a10 page shows the pool's total
    plain = _engine().run()
    replay = from_engine_result(plain, [3] * 6, num_blocks=8, block_size=4, token_budget=64,
                                max_num_seqs=3, prefix_caching=True)
    assert all(s.kv is None for s in replay.steps)
    assert [s.blocks_used for s in replay.steps] == [s.blocks_used for s in plain.steps]
    page = render_page([run_data(replay, "a10")])
    assert ',null]' in page  # the step arrays end with kv = null


def test_a_trace_too_long_is_refused():
    rec = StepRecorder(num_blocks=4, block_size=4, token_budget=8, max_num_seqs=1, max_steps=2)
    rec.add_request(0, 3, 9, 0.0)
    rec.record(0, 0.0, 1.0, [(0, 3, 0)], admitted=[0])
    rec.record(1, 1.0, 1.0, [(0, 1, 3)])
    with pytest.raises(ValueError, match="at most 2 steps"):
        rec.record(2, 2.0, 1.0, [(0, 1, 4)])
    assert MAX_TRACE_STEPS >= 10_000


def test_chrome_trace_has_one_complete_event_per_step(sim):
    events = chrome_trace(sim)["traceEvents"]
    steps = [e for e in events if e.get("cat") == "step"]
    assert [e["ph"] for e in steps] == ["X"] * len(sim.steps)
    assert [e["dur"] for e in steps] == [s.dur_s * 1e6 for s in sim.steps]
    assert [e["ts"] for e in steps] == [s.start_s * 1e6 for s in sim.steps]
    spans = [e for e in events if e.get("cat") == "request"]
    assert {e["tid"] - 1 for e in spans} == {r.request_id for r in sim.requests}
    assert all(e["dur"] >= 0 for e in spans)
    decode_us = sum(e["dur"] for e in spans if e["name"] == "decode")
    per_step = sum(s.dur_s * 1e6 * k.count("decode") for s in sim.steps for k in [list(s.kinds)])
    assert math.isclose(decode_us, per_step, rel_tol=1e-9)  # merged spans cover every decode
    json.dumps(chrome_trace(sim), allow_nan=False)  # valid JSON: no NaN


def test_the_page_embeds_its_data_and_loads_nothing(eng):
    page = render_page([run_data(eng, "engine")])
    assert not re.search(r"\s(src|href)\s*=", page)
    assert "<link" not in page and "@import" not in page and "fetch(" not in page
    blob = re.search(r'<script type="application/json" id="trace-data">(.*?)</script>', page,
                     re.S).group(1)
    data = json.loads(blob.replace("<\\/", "</"))
    run = data["runs"][0]
    assert len(run["steps"]) == len(eng.steps) and len(run["requests"]) == len(eng.requests)
    assert [r["text"] for r in run["requests"]] == [r.text for r in eng.requests]


def test_a_generated_script_tag_cannot_end_the_data():
    rec = StepRecorder(num_blocks=4, block_size=4, token_budget=8, max_num_seqs=1)
    rec.add_request(0, 3, 1, 0.0)
    rec.record(0, 0.0, 1.0, [(0, 3, 0)], admitted=[0], finished=[0])
    page = render_page([run_data(rec.trace("engine", {0: "</script><b>x"}), "t")])
    assert page.count("</script>") == 3  # the error hook's, the data's, the drawing's


def test_trace_command_writes_both_files(tmp_path, capsys):
    out = tmp_path / "t"
    assert main(["trace", "--n", "12", "--rate", "30", "--num-blocks", "160", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"\d+ preemptions", printed) and "wrote" in printed
    assert sorted(p.name for p in out.iterdir()) == ["trace.html", "trace.json"]
    chrome = json.loads((out / "trace.json").read_text())
    assert sum(e.get("cat") == "step" for e in chrome["traceEvents"]) > 0


@pytest.mark.parametrize("argv, message", [
    (["--n", "100000"], "--n 100000: the simulator is traced for at most 400 requests"),
    (["--engine", "--n", "65"], "--n 65: the engine is traced for at most 64 requests"),
    (["--engine", "--speculate", "2"], "--speculate is traced on the simulator"),
    (["--speculate", "2", "--acceptance", "1.5"], "--acceptance must be in [0, 1], got 1.5"),
    (["--engine", "--host-blocks", "4"], "--host-blocks 4 needs --prefix-caching"),
    (["--gpu", "NO_SUCH_GPU"], "NO_SUCH_GPU"),
])
def test_refused_before_any_work(tmp_path, capsys, argv, message):
    out = tmp_path / "never"
    assert main(["trace", *argv, "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and message in captured.err
    assert captured.err.startswith("servelab trace: error: ") and captured.err.count("\n") == 1
    assert not out.exists()


def test_bad_numbers_are_named(tmp_path, capsys):
    assert main(["trace", "--rate", "0", "--out", str(tmp_path)]) == 2
    assert "argument --rate: must be a number > 0, got '0'" in capsys.readouterr().err
