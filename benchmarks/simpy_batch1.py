"""A SimPy model of batch-1 FCFS serving (the peer: SimPy-based LLM serving
simulators are the common way to write this in Python).

One GPU is a ``simpy.Resource`` of capacity 1. Each request is a process that waits until its
arrival, queues for the GPU (SimPy's resource queue is FIFO), then holds it for one prefill step
and ``L_o - 1`` decode steps, each a ``timeout`` of the paper GPU's step time (priced by the
pure-Python reference ``Pricer``). Every request process starts at time 0 and sleeps exactly
its arrival time, so arrivals are the workload's, bit for bit; steps accumulate as
``now + step`` like the Rust simulator, so the timestamps come out identical.

SimPy is an optional dependency (the ``bench`` extra); :func:`available` says whether it is
installed.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def available() -> bool:
    try:
        import simpy  # noqa: F401
    except ImportError:
        return False
    return True


def run_batch1(requests: Any, pricer: Any) -> dict[str, np.ndarray]:
    import simpy

    env = simpy.Environment()
    gpu = simpy.Resource(env, capacity=1)
    n = len(requests)
    start, first, finish = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    arrival = requests.arrival_s.tolist()
    prompt = requests.prompt_len.tolist()
    output = requests.output_len.tolist()

    def request(i: int):  # a SimPy process
        yield env.timeout(arrival[i])
        with gpu.request() as slot:
            yield slot
            start[i] = env.now
            p = prompt[i]
            yield env.timeout(pricer.price([(p, 0)])[0])
            first[i] = env.now
            for s in range(1, output[i]):
                yield env.timeout(pricer.price([(1, p + s - 1)])[0])
            finish[i] = env.now

    for i in range(n):
        env.process(request(i))
    env.run()
    return {"start_s": start, "first_token_s": first, "finish_s": finish}
