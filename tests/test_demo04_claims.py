"""Demo 04 parts 2-4 (lecture §5.4, §5.5, exercise 9): the claims, each with its tolerance.

Part 2 (CNN server). Lecture: attainment 67% -> 91%, 9% rejected, every admitted request on
time. The burst load is random; over six seeds we get 65-73% -> 89.5-92%, 8-10.5% rejected, so
single runs are held to those bands and the six-seed mean to +-2 points of the lecture.

Part 3 (LLM at batch 1). Lecture: mean estimate about 70%, oracle 489/600 = 81.5%, 17% of
the admitted late, 26% false rejections. Ours (demo 03's workload, seed 0): oracle 490/600 =
81.7%; mean estimate 73.2%, 14.8% late, 28.2% false rejections: the same shape, a few points
off, which we leave as it is (the lecture's length distribution is not published; demo 03's
sigma was chosen for demo 03's figures, not for these).
"""

from __future__ import annotations

import numpy as np
import pytest

from servelab import lecture
from servelab.demos import demo04


@pytest.fixture(scope="module")
def cnn():
    return demo04.part2()


@pytest.fixture(scope="module")
def llm():
    return demo04.part3()


def test_cnn_early_rejection(cnn):
    for r in cnn:
        assert 0.62 <= r.accept_all <= 0.75
        assert 0.88 <= r.early_reject <= 0.93
        assert 0.07 <= r.rejected <= 0.11
        assert r.accepted_on_time == 1.0  # every admitted request on time, exactly
        assert r.early_reject == pytest.approx(1.0 - r.rejected)
        assert 0.25 <= r.doomed_busy_share <= 0.40  # "a third of the GPU's time"
    assert np.mean([r.accept_all for r in cnn]) == pytest.approx(0.67, abs=0.02)
    assert np.mean([r.early_reject for r in cnn]) == pytest.approx(0.91, abs=0.02)
    assert np.mean([r.rejected for r in cnn]) == pytest.approx(0.09, abs=0.02)


def test_llm_oracle_is_81_5_percent(llm):
    o = llm["oracle"]
    assert o.n == 600
    assert abs(o.on_time - 489) <= 6  # lecture 489/600; ours 490
    assert o.accepted_late == 0 and o.false_rejections == 0


def test_llm_mean_estimate(llm):
    m, o, every = llm["mean length"], llm["oracle"], llm["accept all"]
    assert m.attainment == pytest.approx(0.70, abs=0.04)  # ours 73.2%
    assert every.attainment < m.attainment < o.attainment
    assert m.late_share_of_accepted == pytest.approx(0.17, abs=0.04)  # ours 14.8%
    assert m.false_rejection_share == pytest.approx(0.26, abs=0.04)  # ours 28.2%


def test_exercise9_degrades_smoothly_to_the_mean_estimate(llm):
    """Lecture: attainment falls smoothly with sigma; sigma = 1 is about the mean estimate's
    (70%); the loss is mostly false rejections. Ours: 81.7, 80.5, 78.5, 76.2, 73.7%."""
    rows = demo04.exercise9()
    att = [rows[s].attainment for s in lecture.SIGMAS]
    assert rows[0.0] == llm["oracle"]
    assert all(a > b for a, b in zip(att, att[1:]))
    assert att[-1] == pytest.approx(llm["mean length"].attainment, abs=0.03)
    fr = [rows[s].false_rejections for s in lecture.SIGMAS]
    late = [rows[s].accepted_late for s in lecture.SIGMAS]
    assert all(a <= b for a, b in zip(fr, fr[1:])) and fr[-1] > 2 * late[-1]
