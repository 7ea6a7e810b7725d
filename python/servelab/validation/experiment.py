"""One inference-perf experiment folder, read: the server as configured, the load generator's
workload, and what was measured in each stage (lecture §4's metrics, by inference-perf's names).

The layout (the shipped copy is ``servelab/data/vllm_h100_inference_perf/``)::

    NAME/exp-config.yaml            the vLLM server's settings (model, tensor_parallelism, ...)
    NAME/profile.yaml               the generator's configuration as written by its user (JSON)
    NAME/results/config.yaml        the generator's configuration as it resolved it: what ran
    NAME/results/stage_N_lifecycle_metrics.json   what it measured in stage N

The resolved ``results/config.yaml`` wins over ``profile.yaml``: the generator version that made
the shipped runs did not know the profile's ``num_unique_system_prompts``,
``num_users_per_system_prompt`` and ``enable_multi_turn_chat`` keys and ran its defaults (10
groups of 10 prompts, single turn), which the measured prompt lengths confirm (they do not grow
turn after turn). ``profile.yaml`` is read only when ``results/config.yaml`` is missing.
Without ``exp-config.yaml`` the server settings are the ones the shipped data's README gives
for every run, and the tensor-parallel degree comes from the folder name (``-tp4-``).

>>> from servelab.validation.experiment import read_experiment, shipped_experiment_dirs
>>> e = read_experiment(shipped_experiment_dirs()[0])
>>> e.server.model_name, e.server.tp, e.data.num_groups, [(s.rate, s.duration_s) for s in e.stages]
('Llama-2-7b-hf', 1, 10, [(5.0, 600.0), (10.0, 600.0)])
>>> m = e.measured[0]
>>> m.successes, m.failures, round(m.latency["time_to_first_token"]["mean"] * 1e3, 1)
(3000, 0, 25.0)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servelab import _checks
from servelab.validation.yaml_subset import loads

__all__ = ["ServerConfig", "SharedPrefixConfig", "Stage", "MeasuredStage", "Experiment", "read_experiment",
           "shipped_data_dir", "shipped_experiment_dirs", "LATENCY_METRICS", "DATASET_SERVER_DEFAULTS",
           "CLIENT_TIMEOUT_S"]

# inference-perf's latency distributions, per successful request (its report's names)
LATENCY_METRICS = ("time_to_first_token", "inter_token_latency", "time_per_output_token",
                   "normalized_time_per_output_token", "request_latency")
# what the shipped data's README says every run used, for a folder without exp-config.yaml
DATASET_SERVER_DEFAULTS = {"max_model_len": 4096, "max_num_batched_tokens": 2048, "max_num_seqs": 128}
# the generator's HTTP client (aiohttp) gives up on a request after its default total timeout
# of 5 minutes when the configuration sets none: the overloaded runs' failures end at 300.5 s
CLIENT_TIMEOUT_S = 300.0
_TP_IN_NAME = re.compile(r"-tp(\d+)(?:-|$)")


def shipped_data_dir() -> Path:
    """The shipped copy of the measured runs (``servelab/data/vllm_h100_inference_perf``)."""
    return Path(__file__).resolve().parents[1] / "data" / "vllm_h100_inference_perf"


def shipped_experiment_dirs() -> list[Path]:
    """Every shipped experiment folder, sorted by name."""
    return sorted(p for p in shipped_data_dir().iterdir() if (p / "results").is_dir())


@dataclass(frozen=True)
class ServerConfig:
    """The vLLM server as configured. Fields the configuration leaves out take vLLM V1's
    defaults of the time: chunked prefill and prefix caching on, blocks of 16 tokens, 90% of
    GPU memory for weights + KV cache."""

    model: str  # the Hugging Face id, e.g. meta-llama/Llama-2-7b-hf
    tp: int
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    chunked_prefill: bool = True
    prefix_caching: bool = True

    @property
    def model_name(self) -> str:
        """The model's name after its last ``/`` (the folder name under ``model_configs``)."""
        return self.model.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class SharedPrefixConfig:
    """inference-perf's ``shared_prefix`` data generator: ``num_groups`` system prompts of
    ``system_prompt_len`` random tokens, each with ``num_prompts_per_group`` questions of
    ``question_len``; every answer ``output_len`` tokens (``ignore_eos``)."""

    num_groups: int
    num_prompts_per_group: int
    system_prompt_len: int
    question_len: int
    output_len: int
    multi_turn: bool = False
    ignore_eos: bool = True


@dataclass(frozen=True)
class Stage:
    """A constant-rate stage: ``int(rate * duration_s)`` requests over ``duration_s`` seconds."""

    rate: float
    duration_s: float

    @property
    def n_requests(self) -> int:
        return int(self.rate * self.duration_s)


@dataclass(frozen=True)
class MeasuredStage:
    """What the generator measured in one stage: request counts, and for the successes each
    latency distribution (``{"mean", "p90", ...}`` in seconds, keyed by :data:`LATENCY_METRICS`;
    ``None`` when nothing succeeded) and the prompt / output length distributions (tokens, as
    its tokenizer counted the text)."""

    index: int
    requests: int
    successes: int
    failures: int
    latency: dict[str, dict[str, float] | None]
    prompt_len: dict[str, float] | None
    output_len: dict[str, float] | None
    failure_latency: dict[str, float] | None = field(default=None)


@dataclass(frozen=True)
class Experiment:
    name: str
    path: Path
    server: ServerConfig
    data: SharedPrefixConfig
    stages: tuple[Stage, ...]
    measured: tuple[MeasuredStage, ...]
    streaming: bool = True
    client_timeout_s: float = CLIENT_TIMEOUT_S

    def overloaded(self, stage: int) -> bool:
        """True when most of the stage's requests failed: a saturated server whose successes
        are the lucky few, not a steady state (see the shipped data's README)."""
        m = self.measured[_checks.integer("stage", stage, 0, len(self.measured) - 1)]
        return m.failures > 0 and m.failures >= 0.1 * m.requests


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None


def _need(d: Any, key: str, where: str) -> Any:
    if not isinstance(d, dict) or key not in d:
        raise ValueError(f"{where}: missing {key!r}")
    return d[key]


def _whole(value: Any, name: str, where: str, lo: int = 1) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    try:
        return _checks.integer(name, value, lo, None)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None


def _number(value: Any, name: str, where: str) -> float:
    try:
        return _checks.positive(name, value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None


def _server(folder: Path, generator: dict[str, Any]) -> ServerConfig:
    launch = folder / "exp-config.yaml"
    conf: dict[str, Any] = dict(DATASET_SERVER_DEFAULTS)
    where = str(launch)
    if launch.is_file():
        read = loads(launch.read_text(encoding="utf-8"), where)
        if not isinstance(read, dict):
            raise ValueError(f"{where}: expected a mapping of settings")
        conf.update(read)
    model = conf.get("model") or (generator.get("server") or {}).get("model_name")
    if not isinstance(model, str) or not model:
        raise ValueError(f"{folder}: no model named (exp-config.yaml 'model' or the generator's server.model_name)")
    tp = conf.get("tensor_parallelism", conf.get("tensor_parallel_size"))
    if tp is None:
        found = _TP_IN_NAME.search(folder.name)
        if not found:
            raise ValueError(f"{folder}: no tensor-parallel degree (exp-config.yaml or '-tpN-' in the folder name)")
        tp = int(found.group(1))
    return ServerConfig(
        model=model, tp=_whole(tp, "tensor_parallelism", where),
        max_num_batched_tokens=_whole(conf["max_num_batched_tokens"], "max_num_batched_tokens", where),
        max_num_seqs=_whole(conf["max_num_seqs"], "max_num_seqs", where),
        max_model_len=_whole(conf["max_model_len"], "max_model_len", where),
        block_size=_whole(conf.get("block_size", 16), "block_size", where),
        gpu_memory_utilization=float(_checks.real("gpu_memory_utilization",
                                                  conf.get("gpu_memory_utilization", 0.9), 0.0, 1.0, lo_open=True)),
        chunked_prefill=bool(conf.get("enable_chunked_prefill", True)),
        prefix_caching=bool(conf.get("enable_prefix_caching", True)))


def _generator_config(folder: Path) -> tuple[dict[str, Any], str]:
    resolved = folder / "results" / "config.yaml"
    if resolved.is_file():
        conf = loads(resolved.read_text(encoding="utf-8"), str(resolved))
        where = str(resolved)
    else:
        profile = folder / "profile.yaml"
        if not profile.is_file():
            raise ValueError(f"{folder}: neither results/config.yaml nor profile.yaml is there")
        conf, where = _read_json(profile), str(profile)
    if not isinstance(conf, dict):
        raise ValueError(f"{where}: expected a mapping")
    return conf, where


def _shared_prefix(conf: dict[str, Any], where: str) -> SharedPrefixConfig:
    data = _need(conf, "data", where)
    kind = _need(data, "type", where + " data")
    if kind != "shared_prefix":
        raise ValueError(f"{where}: data.type is {kind!r}; only inference-perf's 'shared_prefix' generator is "
                         "reproduced")
    sp = _need(data, "shared_prefix", where + " data")
    w = where + " data.shared_prefix"

    def field_(names: tuple[str, ...], default: int) -> int:
        for name in names:
            if name in sp:
                return _whole(sp[name], name, w)
        return default

    server = conf.get("server") or {}
    return SharedPrefixConfig(
        num_groups=field_(("num_groups", "num_unique_system_prompts"), 10),
        num_prompts_per_group=field_(("num_prompts_per_group", "num_users_per_system_prompt"), 10),
        system_prompt_len=field_(("system_prompt_len",), 100),
        question_len=field_(("question_len",), 50),
        output_len=field_(("output_len",), 50),
        multi_turn=bool(sp.get("enable_multi_turn_chat", False)),
        ignore_eos=bool(server.get("ignore_eos", False)))


def _stages(conf: dict[str, Any], where: str) -> tuple[Stage, ...]:
    load = _need(conf, "load", where)
    kind = load.get("type", "constant")
    if kind != "constant":
        raise ValueError(f"{where}: load.type is {kind!r}; only constant-rate stages are reproduced")
    stages = _need(load, "stages", where + " load")
    if not isinstance(stages, list) or not stages:
        raise ValueError(f"{where}: load.stages must be a non-empty list")
    out = []
    for k, s in enumerate(stages):
        w = f"{where} load.stages[{k}]"
        out.append(Stage(_number(_need(s, "rate", w), "rate", w), _number(_need(s, "duration", w), "duration", w)))
    return tuple(out)


def _measured(path: Path, index: int) -> MeasuredStage:
    j = _read_json(path)
    where = str(path)
    ok = _need(j, "successes", where)
    bad = _need(j, "failures", where)
    lat = _need(ok, "latency", where + " successes")
    latency = {name: lat.get(name) for name in LATENCY_METRICS}
    n_ok = _whole(_need(ok, "count", where), "successes.count", where, 0)
    n_bad = _whole(_need(bad, "count", where), "failures.count", where, 0)
    load = j.get("load_summary") or {}
    return MeasuredStage(index=index, requests=_whole(load.get("count", n_ok + n_bad), "load_summary.count", where, 0),
                         successes=n_ok, failures=n_bad, latency=latency, prompt_len=ok.get("prompt_len"),
                         output_len=ok.get("output_len"), failure_latency=bad.get("request_latency"))


def read_experiment(path: str | Path) -> Experiment:
    """Reads the experiment folder ``path``; a missing or malformed file raises ``ValueError``
    naming it."""
    folder = Path(_checks.instance("path", path, (str, Path), "a folder path (str or Path)"))
    if not folder.is_dir():
        raise ValueError(f"path must be an experiment folder, got {str(path)!r} (not a folder)")
    conf, where = _generator_config(folder)
    stages = _stages(conf, where)
    api = conf.get("api") or {}
    measured = []
    for k in range(len(stages)):
        f = folder / "results" / f"stage_{k}_lifecycle_metrics.json"
        if not f.is_file():
            raise ValueError(f"{folder}: stage {k} is configured but {f.name} is missing")
        measured.append(_measured(f, k))
    timeout = (conf.get("load") or {}).get("request_timeout")
    return Experiment(name=folder.name, path=folder, server=_server(folder, conf), data=_shared_prefix(conf, where),
                      stages=stages, measured=tuple(measured), streaming=bool(api.get("streaming", True)),
                      client_timeout_s=CLIENT_TIMEOUT_S if timeout is None else _number(timeout, "request_timeout", where))
