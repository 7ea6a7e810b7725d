"""Demo paged's claims: paged blocks waste less than contiguous reservations, prefix caching
computes a shared system prompt once, and every engine setting gives generate()'s tokens."""

from __future__ import annotations

import io

from rich.console import Console

from servelab import cli
from servelab.demos import demo_paged


def test_paged_reservations_waste_less_the_smaller_the_block():
    rows = demo_paged.compute_waste(demo_paged.request_mix())
    contiguous, paged = rows[0], rows[1:]
    assert contiguous.waste > 0.5  # most of max_len is never used (§2.4)
    assert paged[0].waste == 0  # block 1: exactly the tokens
    wastes = [r.waste for r in paged]
    assert wastes == sorted(wastes) and wastes[-1] < contiguous.waste
    assert all(r.used_tokens == contiguous.used_tokens for r in paged)


def test_every_engine_setting_gives_the_reference_tokens_and_the_tight_pool_preempts():
    requests = demo_paged.request_mix()
    runs = demo_paged.compute_equality(requests)
    assert all(run.equal == len(requests) for run in runs)
    assert runs[-1].preemptions > 0 and runs[0].preemptions == 0
    assert runs[0].max_batch > demo_paged.NUM_BLOCKS * demo_paged.BLOCK_SIZE // 256


def test_a_shared_system_prompt_is_computed_once():
    off, on = demo_paged.compute_prefix()
    n, sys_len = demo_paged.N_SHARED, demo_paged.SYSTEM_PROMPT_LEN
    assert off.computed_prompt_tokens == off.prompt_tokens and off.hits == 0
    assert on.computed_prompt_tokens == off.prompt_tokens - (n - 1) * sys_len
    assert on.hits == (n - 1) * (sys_len // demo_paged.BLOCK_SIZE)
    assert off.equal == on.equal == n


def test_the_cli_runs_the_demo(tmp_path, monkeypatch):
    buf = io.StringIO()
    monkeypatch.setattr(cli, "Console", lambda: Console(file=buf, width=120))
    assert cli.main(["demo", "paged", "--out", str(tmp_path)]) == 0
    text = buf.getvalue()
    assert "contiguous (max_len 256)" in text and "24/24" in text and "12/12" in text
