"""Pure-Python reference of the fixed-service-time server (``servelab.fixed_service``).

>>> run_fixed_service([0.0, 0.0, 0.0], 0.01, 0.015)["rejected"]
[False, True, True]
"""

from __future__ import annotations

from typing import Any, Sequence


def run_fixed_service(arrival_s: Sequence[float], service_s: float, slo_s: float | None) -> dict[str, Any]:
    nan = float("nan")
    out: dict[str, Any] = {"start_s": [], "finish_s": [], "rejected": [], "busy_s": 0.0}
    free = 0.0
    for a in arrival_s:
        start = max(free, a)
        finish = start + service_s
        late = slo_s is not None and finish - a > slo_s
        out["start_s"].append(nan if late else start)
        out["finish_s"].append(nan if late else finish)
        out["rejected"].append(late)
        if not late:
            out["busy_s"] += service_s
            free = finish
    return out
