"""The simulated clock against a real server (lecture §8.3: tokens real, time from a GPU on
paper): measured inference-perf runs of vLLM on H100 are read, their workload rebuilt, the
server as configured simulated on the paper GPU, and the client's statistics compared.

One module a job: :mod:`.experiment` reads a run's folder (:mod:`.yaml_subset` its YAML),
:mod:`.hf_config` a model's ``config.json``, :mod:`.generator` rebuilds the workload,
:mod:`.simulate` runs the server, :mod:`.stats` computes inference-perf's statistics,
:mod:`.calibration` holds what a real stack adds to the paper GPU and :mod:`.fit` fits it,
:mod:`.report` compares and plots, :mod:`.command` is ``servelab validate``.

>>> from servelab.validation import PAPER, read_experiment, shipped_experiment_dirs, shipped_models
>>> from servelab.validation import simulate_experiment
>>> e = read_experiment(shipped_experiment_dirs()[0])
>>> p = simulate_experiment(e, shipped_models(), PAPER)
>>> e.measured[0].latency["request_latency"]["mean"] > p.stages[0].summary.metric("e2e_mean")  # paper GPU: fast
True
"""

from servelab.validation.calibration import FITTED, PAPER, Calibration, load_calibration, save_calibration
from servelab.validation.experiment import Experiment, read_experiment, shipped_experiment_dirs
from servelab.validation.hf_config import ServedModel, model_from_config, read_model_configs, shipped_models
from servelab.validation.simulate import ExperimentPrediction, simulate_experiment

__all__ = ["Calibration", "PAPER", "FITTED", "load_calibration", "save_calibration", "Experiment",
           "read_experiment", "shipped_experiment_dirs", "ServedModel", "model_from_config", "read_model_configs",
           "shipped_models", "ExperimentPrediction", "simulate_experiment"]
