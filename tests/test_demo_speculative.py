"""Demo speculative on a small grid: greedy speculation keeps the target's tokens
whatever the draft, measured tokens per step follow the closed form, and the paper speed-up
rises with k for a perfect draft and falls below 1 for a useless one."""

from __future__ import annotations

import io

import numpy as np
import pytest
from rich.console import Console

from servelab import demos, plots
from servelab.demos import demo_speculative as demo
from servelab.tiny_llm import TINY, TinyLLM
from servelab.tiny_llm.speculative import expected_tokens_per_step

NEW_TOKENS = 24
KS = (1, 4)


@pytest.fixture(scope="module")
def target() -> TinyLLM:
    return TinyLLM(TINY)


@pytest.fixture(scope="module")
def drafts(target) -> dict[str, TinyLLM]:
    return demo.drafts(target, noises=(0.0, 0.2))


@pytest.fixture(scope="module")
def rows(target, drafts) -> list[demo.SweepRow]:
    return demo.compute_sweep(target, drafts, ks=KS, new_tokens=NEW_TOKENS)


def _row(rows, draft, k):
    return next(r for r in rows if r.draft == draft and r.k == k)


def test_greedy_tokens_are_the_targets_whatever_the_draft(target, drafts, rows):
    same = demo.compute_same_tokens(target, drafts, k=4, new_tokens=NEW_TOKENS)
    assert [r.draft for r in same] == ["noise 0", "noise 0.2", "unrelated model"]
    assert all(r.equal for r in same) and all(r.equal for r in rows)
    # the drafts really differ in quality, or equality would prove little
    rates = [r.acceptance_rate for r in same]
    assert rates[0] == 1.0 and rates[0] > rates[1] > rates[2] and rates[2] < 0.2


def test_measured_tokens_per_step_beside_the_closed_form(rows):
    for r in rows:
        assert r.predicted_tokens_per_step == expected_tokens_per_step(r.acceptance_rate, r.k)
        assert 1.0 <= r.tokens_per_step <= r.k + 1
        # independent acceptances and k guesses every step are the closed form's assumptions;
        # on this grid the real runs stay within 15% of it
        assert r.tokens_per_step == pytest.approx(r.predicted_tokens_per_step, rel=0.15)


def test_paper_speedup_rises_with_k_for_a_perfect_draft_and_sinks_for_a_useless_one(rows):
    perfect = [_row(rows, "noise 0", k).speedup for k in KS]
    useless = [_row(rows, "unrelated model", k).speedup for k in KS]
    assert 1.0 < perfect[0] < perfect[1]
    assert 1.0 > useless[0] > useless[1]  # every draft step is paid, almost none is kept
    for r in rows:
        assert r.speedup == pytest.approx(r.predicted_speedup, rel=0.15), r


def test_decode_time_counts_one_step_per_token_after_the_prefill():
    assert demo.decode_time_s(11, 1) == 0.0
    one = demo.decode_time_s(11, 2)
    assert one > 0 and demo.decode_time_s(11, 3) == pytest.approx(2 * one, rel=1e-3)


def test_the_plot_and_the_tables(rows, tmp_path):
    predicted, measured = demo.plot_curves(rows)
    assert set(measured["tokens"]) == {f"k={k}" for k in KS}
    a, tok = measured["tokens"]["k=4"]
    assert np.all(np.diff(a) >= 0) and len(a) == 3
    path = plots.speculative_speedup(tmp_path / "spec.png", predicted, measured)
    assert path is not None and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plots.speculative_speedup(tmp_path / "none.png", predicted, {}) is None
    assert not (tmp_path / "none.png").exists()
    buf = io.StringIO()
    demo.part2_sweep(Console(file=buf, width=200), rows)
    text = buf.getvalue()
    assert "(1-a^(k+1))/(1-a)" in text and f"{_row(rows, 'noise 0', 4).speedup:.2f}x" in text


def test_engine_part_same_tokens_and_speedup_against_predicted(target, drafts):
    rows = demo.compute_engine(target, drafts, k=4, new_tokens=NEW_TOKENS)
    by = {r.draft: r for r in rows}
    assert all(r.equal for r in rows)
    perfect, useless = by["noise 0"], by["unrelated model"]
    assert perfect.acceptance_rate == 1.0 and perfect.tokens_per_step == 5.0
    assert perfect.speedup > 1.5 and perfect.speedup == pytest.approx(perfect.predicted_speedup, rel=0.1)
    assert useless.speedup < 1.0 and useless.speedup == pytest.approx(useless.predicted_speedup, rel=0.1)
    assert perfect.speedup > by["noise 0.2"].speedup > useless.speedup


def test_simulator_part_follows_the_closed_form():
    rows = demo.compute_sim(acceptances=(0.6, 0.9), ks=(2, 6), n=40)
    for r in rows:
        # low load, long outputs: the closed form and the one-request price hold within 4%
        assert r.tokens_per_step == pytest.approx(r.predicted_tokens_per_step, rel=0.04), r
        assert r.speedup == pytest.approx(r.predicted_speedup, rel=0.04), r
    assert rows[3].speedup > rows[1].speedup  # a = 0.9 at k = 6 beats a = 0.6 at k = 6
    buf = io.StringIO()
    demo.part4_sim(Console(file=buf, width=200), rows)
    assert f"{rows[3].speedup:.2f}x" in buf.getvalue()


def test_the_cli_finds_it():
    assert "speculative" in demos.available()
    assert demos.load("speculative") is demo
