"""Calibration files, the all-reduce's two forms, and the fit recovering a coefficient it was
made with (a small run whose "measurements" come from a known clock)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from servelab.validation.calibration import PAPER, Calibration, load_calibration, save_calibration
from servelab.validation.experiment import MeasuredStage, SharedPrefixConfig, Stage, read_experiment
from servelab.validation.fit import _nelder_mead, calibration_loss, fit_calibration, training_stages
from servelab.validation.hf_config import shipped_models
from servelab.validation.simulate import simulate_experiment
from servelab.validation.experiment import shipped_experiment_dirs


def test_files_round_trip_and_refuse_junk(tmp_path):
    c = PAPER.with_values(bandwidth=0.75, allreduce="one_shot", note="mine")
    path = save_calibration(c, tmp_path / "c.json")
    assert load_calibration(path) == c
    assert load_calibration("fitted").note.startswith("fitted on")
    (tmp_path / "bad.json").write_text(json.dumps({"bandwidth": 1.5}))
    with pytest.raises(ValueError, match="bandwidth must be a finite number > 0.0 and <= 1.0, got 1.5"):
        load_calibration(tmp_path / "bad.json")
    (tmp_path / "bad.json").write_text(json.dumps({"allreduce": "tree"}))
    with pytest.raises(ValueError, match="allreduce must be 'ring' or 'one_shot', got 'tree'"):
        load_calibration(tmp_path / "bad.json")
    (tmp_path / "bad.json").write_text("[1, 2")
    with pytest.raises(ValueError, match="is not JSON"):
        load_calibration(tmp_path / "bad.json")
    assert load_calibration(save_calibration(c, tmp_path / "new" / "c.json")) == c  # its folder made, as --json's
    (tmp_path / "plain").write_text("")
    with pytest.raises(OSError):
        save_calibration(c, tmp_path / "plain" / "c.json")  # a file where its folder should be
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json", "c.json", "new", "plain"]  # nothing half-written
    assert [p.name for p in (tmp_path / "new").iterdir()] == ["c.json"]


def test_allreduce_forms():
    ring, one = PAPER, PAPER.with_values(allreduce="one_shot")
    assert ring.allreduce_cost(1) == one.allreduce_cost(1) == (0, 0.0)
    assert ring.allreduce_cost(2) == (2, 1.0) and one.allreduce_cost(2) == (1, 1.0)
    assert ring.allreduce_cost(4) == (6, 1.5) and one.allreduce_cost(4) == (1, 3.0)


def test_nelder_mead_finds_a_known_minimum():
    x, value, evals = _nelder_mead(lambda v: float(((v - [1.0, -2.0]) ** 2).sum()), x0=__import__("numpy").zeros(2),
                                   step=0.5, max_evals=400, tol=1e-12)
    assert x.tolist() == pytest.approx([1.0, -2.0], abs=1e-4) and value < 1e-8 and evals <= 400


def _small_experiment():
    """A shipped run cut to one short stage at its own rate (about 120 requests)."""
    e = read_experiment(shipped_experiment_dirs()[0])
    return dataclasses.replace(e, stages=(Stage(4.0, 30.0),), measured=e.measured[:1],
                               data=dataclasses.replace(e.data, num_groups=3, num_prompts_per_group=4))


def test_the_fit_recovers_the_front_end_it_was_made_with():
    models = shipped_models()
    e = _small_experiment()
    truth = PAPER.with_values(frontend_s=0.012)
    made = simulate_experiment(e, models, truth).stages[0].summary
    # the measured prompt lengths stay: they set the workload's token counts
    m = MeasuredStage(0, 120, made.successes, made.failures, dict(made.latency), e.measured[0].prompt_len, None)
    e = dataclasses.replace(e, measured=(m,))
    assert calibration_loss(truth, training_stages([e], models), models) == pytest.approx(0.0, abs=1e-20)
    fit = fit_calibration([e], models, fields=("frontend_s",), start=PAPER, max_evals=60)
    assert fit.fitted == ("frontend_s",)
    assert fit.calibration.frontend_s == pytest.approx(0.012, rel=1e-3)
    assert fit.loss < 1e-6


def test_a_fit_on_one_card_leaves_the_all_reduce_alone():
    models = shipped_models()
    e = _small_experiment()
    made = simulate_experiment(e, models, PAPER).stages[0].summary
    e = dataclasses.replace(e, measured=(MeasuredStage(0, 120, made.successes, 0, dict(made.latency),
                                                       e.measured[0].prompt_len, None),))
    fit = fit_calibration([e], models, fields=("hop_latency_s", "link_efficiency", "frontend_s"), start=PAPER,
                          max_evals=30)
    assert fit.fitted == ("frontend_s",)
    assert fit.calibration.hop_latency_s == PAPER.hop_latency_s
    assert isinstance(SharedPrefixConfig(1, 1, 1, 1, 1), SharedPrefixConfig) and isinstance(Calibration(), Calibration)


def test_a_layer_costs_each_step_its_model_depth_times():
    # layer_s is priced per layer of the model, so a step of a 32-layer model pays 32 of it:
    # the same clock as that many seconds on the per-step constant
    models = shipped_models()
    e = _small_experiment()
    layers = models[e.server.model_name].spec.n_layers
    by_layer = simulate_experiment(e, models, PAPER.with_values(layer_s=3e-5)).stages[0]
    by_step = simulate_experiment(e, models, PAPER.with_values(step_overhead_s=PAPER.step_overhead_s + layers * 3e-5))
    assert by_layer.mean_step_s == pytest.approx(by_step.stages[0].mean_step_s, rel=1e-9)
    assert by_layer.mean_step_s > simulate_experiment(e, models, PAPER).stages[0].mean_step_s
