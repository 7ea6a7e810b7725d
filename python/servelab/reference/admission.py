"""Pure-Python reference of early rejection at batch 1 (lecture §5.3, §5.5).

The rule, as ``rust/src/sim/admission.rs`` states it: at an arrival, lay out the future the
controller believes in, step by step with the predicted output lengths (the request in service
from its start, taken to be over now if it outlived its prediction; then each waiting request);
the arriving request's first token comes one prefill later. Admit when
``first - arrival <= slo_ttft_s``. No early stop here, no caching: slower, and simpler to read.

``would_first_token`` is computed after the run, from the admitted requests' finish times,
where Rust records it during the run: two ways to the same numbers.

>>> from servelab.hw_model import LLAMA3_8B, H100, DEFAULT_EFFICIENCY
>>> from servelab.reference.sim import Pricer
>>> from servelab.workload import Requests
>>> reqs = Requests([0.0, 0.0, 0.0], [10, 10, 10], [100, 100, 100])
>>> admit = early_reject(Pricer(LLAMA3_8B, H100, DEFAULT_EFFICIENCY), reqs, 1.0, [100, 100, 100])
>>> admit(0.0, 2, (0, 0.0), [1])   # two 0.62 s requests ahead: the first token would be late
False
"""

from __future__ import annotations

from typing import Any, Callable, Sequence


def early_reject(pricer: Any, requests: Any, slo_ttft_s: float,
                 predicted_len: Sequence[int]) -> Callable[..., bool]:
    if not slo_ttft_s > 0:
        raise ValueError(f"slo_ttft_s must be a positive finite number, got {slo_ttft_s!r}")
    arrival = requests.arrival_s.tolist()
    prompt = requests.prompt_len.tolist()
    predicted = [int(x) for x in predicted_len]
    assert len(predicted) == len(prompt)

    def prefill(i: int) -> float:
        return pricer.price([(prompt[i], 0)])[0]

    def predicted_end(j: int, t: float) -> float:
        """Request ``j`` run from ``t`` with its predicted length: prefill, then decodes."""
        t = t + prefill(j)
        for s in range(1, predicted[j]):
            t = t + pricer.price([(1, prompt[j] + s - 1)])[0]
        return t

    def admit(now: float, i: int, running: tuple[int, float] | None, queue: Sequence[int]) -> bool:
        t = now
        if running is not None:
            end = predicted_end(running[0], running[1])
            if end > t:  # else: it outlived its prediction, the GPU is taken to be free now
                t = end
        for j in queue:
            t = predicted_end(j, t)
        return (t + prefill(i)) - arrival[i] <= slo_ttft_s

    return admit


def would_first_token(pricer: Any, requests: Any, out: dict[str, Any]) -> list[float]:
    """Per request: its first-token time had it been admitted at its arrival (batch 1 FCFS: it
    starts when the admitted requests before it are done)."""
    free = 0.0
    would = []
    for i, (a, p) in enumerate(zip(requests.arrival_s.tolist(), requests.prompt_len.tolist())):
        start = free if free > a else a
        would.append(start + pricer.price([(p, 0)])[0])
        if not out["rejected"][i]:
            free = out["finish_s"][i]
    return would
