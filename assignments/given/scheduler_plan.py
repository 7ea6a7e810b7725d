"""The plan a scheduler returns for one step (given, not graded): a8's and a10's schedulers
import it (``from scheduler_plan import Plan``). It holds the fields of ``servelab.engine.Plan``
as plain lists, since student code may not import servelab inside the grader's sandbox.

>>> plan = Plan()
>>> plan.batch.append((7, 5, 0)); plan.admitted.append(7)
>>> plan
Plan(batch=[(7, 5, 0)], preempted=[], admitted=[7])
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Plan:
    """``servelab.engine.Plan``'s fields: the batch ``[(request_id, new_tokens, context_len)]``
    (running requests first, then admitted ones), the ids preempted and the ids admitted."""

    batch: list = field(default_factory=list)
    preempted: list = field(default_factory=list)
    admitted: list = field(default_factory=list)
