"""The lecture's serving settings, in one place: the model and GPU it prices, its chat workload,
its SLOs, the rates and batch sizes it sweeps, and the settings of demo 04's admission runs.

The demos, :mod:`servelab.exercises`, :mod:`servelab.lecture_key`, the sweep's defaults and
the tests all read them from here, so that "the lecture's workload" means one thing. (Arrows
run one way: library modules import this module, never a demo.)

>>> MODEL.name, GPU.name, N_REQUESTS, LECTURE_SLO
('Llama-3-8B', 'H100-SXM', 600, SLO(ttft_s=1.0, tpot_s=0.05))
>>> slow, fast = chat_workload(0.5), chat_workload(1.0)  # the same requests, twice the rate
>>> len(fast), bool((fast.prompt_len == slow.prompt_len).all()), float(slow.arrival_s[-1] / fast.arrival_s[-1])
(600, True, 2.0)
"""

from __future__ import annotations

from servelab.hw_model import H100, LLAMA3_8B
from servelab.metrics import SLO
from servelab.workload import Requests, chat_requests

__all__ = ["MODEL", "GPU", "N_REQUESTS", "SEED", "LECTURE_SLO", "RATES", "OVERLOAD_RATE",
           "BATCH_SIZES", "MAX_WAIT_S", "USD_PER_GPU_HOUR", "CONTINUOUS", "chat_workload",
           "CNN_SERVICE_S", "CNN_SLO_S", "LLM_RATE", "LLM_N", "LLM_SEED", "LLM_SLO_TTFT_S",
           "SIGMAS", "NOISE_SEED", "admission_workload"]

# ---- §4.5, demo 03: batching on a paper H100 ---------------------------------------------------

MODEL, GPU = LLAMA3_8B, H100
N_REQUESTS = 600  # "a few hundred requests, tens of simulated minutes" (§4.5); demo 04 uses 600
SEED = 0
LECTURE_SLO = SLO(ttft_s=1.0, tpot_s=0.05)
# arrival rates (req/s) of demo 03's sweep and of exercise 4's definition 1; 0.22 req/s is
# where the lecture reads batch 1's P99 TTFT (about 36% utilisation, demo 03 part 2)
RATES = (0.05, 0.1, 0.2, 0.22, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.5, 2.0, 3.0, 4.0)
OVERLOAD_RATE = 16.0  # req/s: far past every policy's capacity (exercise 5 uses 16 too)
BATCH_SIZES = (8, 32, 128)  # static batching's B
MAX_WAIT_S = 0.2  # a static batch starts when B wait or after this long
USD_PER_GPU_HOUR = 3.0
# demo 03 part 6, continuous batching: vLLM's scheduler defaults (256 seats, 8,192 tokens a
# step, blocks of 16); the KV pool is what fits beside the weights in 90% of the H100
# (hw_model.kv_capacity_tokens).
CONTINUOUS = dict(max_num_seqs=256, max_num_batched_tokens=8192, block_size=16)


def chat_workload(rate: float, n: int = N_REQUESTS, seed: int = SEED) -> Requests:
    """The lecture's chat requests (§4.5) arriving at ``rate`` req/s: the same requests at
    every rate, only the arrival times scale."""
    return chat_requests(n, rate, seed)


# ---- §5.4, demo 04 part 2: a CNN-era server ----------------------------------------------------

CNN_SERVICE_S = 0.010  # exactly 10 ms per inference: capacity 100 req/s
CNN_SLO_S = 0.100

# ---- §5.5, demo 04 part 3 and exercise 9: an LLM at batch 1 with admission control --------------

LLM_RATE = 0.4
LLM_N = N_REQUESTS
LLM_SEED = SEED  # demo 03's workload
LLM_SLO_TTFT_S = 2.0
SIGMAS = (0.0, 0.1, 0.25, 0.5, 1.0)  # exercise 9's predictor noise
NOISE_SEED = 42


def admission_workload() -> Requests:
    """Demo 04 part 3's requests: demo 03's chat workload at ``LLM_RATE`` req/s."""
    return chat_workload(LLM_RATE, LLM_N, LLM_SEED)
