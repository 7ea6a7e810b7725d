"""Reference values of assignment a6_admission (exercises 6 and 9 of lecture 1; §4.3, §5.5),
computed by the reference solution: what the answer key and its table show.

Exercise 9 runs demo 04 part 3's setting (demo 03's chat workload: 600 requests at 0.4 req/s,
workload seed 0; Llama-3-8B on a paper H100 at batch 1; SLO TTFT <= 2 s) through the reference
simulator, with the mean estimate, the oracle and the noisy predictor (noise seed 42).
"""

from __future__ import annotations

from servelab import hw_model as hw
from servelab import lecture
from servelab.hw_model import H100, LLAMA3_8B

SEEDS = {"workload (chat_requests)": lecture.LLM_SEED, "predictor noise": lecture.NOISE_SEED}


def answers(solution):
    adm = solution["admission"]
    yield "ex. 6: 20 calls, 1% slow each", "P(at least one slow call)", adm.p_any_slow(20, 0.01)
    yield "ex. 6: 20 calls, at most 10%", "per-call slow budget", adm.per_call_budget(20, 0.10)
    yield "ex. 6: 20 calls, at most 10%", "per-call percentile", adm.per_call_percentile(20, 0.10)

    r = lecture.admission_workload()
    price = hw.price_constants(LLAMA3_8B, H100)
    slo = lecture.LLM_SLO_TTFT_S
    rows = {"§5.5: mean estimate": adm.mean_lengths(r.output_len),
            "§5.5: oracle": adm.oracle_lengths(r.output_len)}
    rows.update({f"ex. 9: sigma {s:g}": adm.noisy_lengths(r.output_len, s, lecture.NOISE_SEED)
                 for s in lecture.SIGMAS})
    for label, predicted in rows.items():
        run = adm.simulate_early_reject(r.arrival_s, r.prompt_len, r.output_len, predicted, slo, price)
        rep = adm.admission_report(r.arrival_s, run["first_token_s"], run["rejected"],
                                   run["would_first_token_s"], slo)
        yield label, "on time (of 600)", rep["on_time"]
        yield label, "attainment", rep["attainment"]
        yield label, "rejected", rep["rejected"]
        yield label, "late share of accepted", rep["late_share_of_accepted"]
        yield label, "false rejection share", rep["false_rejection_share"]
