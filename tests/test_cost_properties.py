"""Properties of the roofline step cost that any correct implementation keeps."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from servelab import hw_model as hw
from assignment_strategies import batches, efficiencies, gpus, models


@given(models(), gpus, efficiencies, batches, st.data())
def test_more_new_tokens_or_context_never_faster(model, gpu, eff, batch, data):
    i = data.draw(st.integers(0, len(batch) - 1))
    extra_new = data.draw(st.integers(0, 4096))
    extra_ctx = data.draw(st.integers(0, 65536))
    grown = list(batch)
    n, c = grown[i]
    grown[i] = (n + extra_new, c + extra_ctx)
    before = hw.step_cost(model, gpu, batch, eff)
    after = hw.step_cost(model, gpu, grown, eff)
    assert after.time_s >= before.time_s
    assert after.flops >= before.flops and after.bytes_moved >= before.bytes_moved


@given(models(), gpus, efficiencies, st.integers(1, 1024), st.integers(1, 1024), st.integers(0, 32768))
def test_decode_time_per_token_never_increases_with_batch(model, gpu, eff, b1, b2, ctx):
    small, large = sorted((b1, b2))
    c = hw.decode_step_costs(model, gpu, [small, large], [ctx, ctx], efficiency=eff)
    assert c.time_s[1] / large <= c.time_s[0] / small * (1 + 1e-12)


@given(models(), gpus, efficiencies, batches)
def test_bound_agrees_with_the_two_times(model, gpu, eff, batch):
    s = hw.step_cost(model, gpu, batch, eff)
    assert s.bound == ("compute" if s.compute_s > s.memory_s else "memory")
    assert s.time_s == max(s.compute_s, s.memory_s) + eff.overhead_s
    assert 0 < s.mfu <= eff.compute * (1 + 1e-12)


@given(models(), gpus, st.floats(0.01, 1.0), st.floats(0.01, 1.0), st.floats(1.0, 4.0))
def test_kv_capacity_monotone_in_memory_and_mem_util(model, gpu, u1, u2, scale):
    lo, hi = sorted((u1, u2))
    assert hw.kv_capacity_tokens(model, gpu, lo) <= hw.kv_capacity_tokens(model, gpu, hi)
    bigger = hw.GpuSpec("bigger", gpu.peak_flops, gpu.hbm_bandwidth, gpu.memory_bytes * scale)
    assert hw.kv_capacity_tokens(model, gpu, hi) <= hw.kv_capacity_tokens(model, bigger, hi)
    assert hw.kv_capacity_tokens(model, gpu, hi) >= 0


@given(models(), gpus, st.floats(0.01, 1.0))
def test_kv_capacity_is_the_largest_count_that_fits(model, gpu, mem_util):
    cap = hw.kv_capacity_tokens(model, gpu, mem_util)
    budget = gpu.memory_bytes * mem_util - model.weight_bytes
    assume(budget > 0)
    assert cap * model.kv_bytes_per_token <= budget * (1 + 1e-12)
    assert (cap + 1) * model.kv_bytes_per_token > budget * (1 - 1e-12)


@given(models(), gpus, efficiencies, batches, st.permutations(range(16)))
def test_order_of_sequences_does_not_matter(model, gpu, eff, batch, perm):
    shuffled = [batch[i] for i in perm if i < len(batch)]
    a, b = hw.step_cost(model, gpu, batch, eff), hw.step_cost(model, gpu, shuffled, eff)
    assert abs(a.time_s - b.time_s) <= 1e-12 * a.time_s


@given(models(), gpus, efficiencies, st.integers(1, 4096), st.integers(1, 4096), st.integers(0, 65536))
def test_chunked_prefill_costs_the_same_flops_plus_one_lm_head(model, gpu, eff, n1, n2, c):
    # Causal attention: prefilling n1 then n2 tokens attends to exactly the same (query, key)
    # pairs as prefilling n1 + n2 at once; only the LM head runs once more (last token of each
    # step, §3.3). A model that charged the LM head per token, or non-causal attention, fails.
    whole = hw.step_cost(model, gpu, [(n1 + n2, c)], eff)
    first = hw.step_cost(model, gpu, [(n1, c)], eff)
    second = hw.step_cost(model, gpu, [(n2, c + n1)], eff)
    lm_head = 2.0 * model.vocab_size * model.d_model
    assert abs(first.flops + second.flops - (whole.flops + lm_head)) <= 1e-9 * whole.flops
