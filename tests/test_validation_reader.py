"""Reading an inference-perf experiment folder: a small one made by hand, the fallbacks the
reader documents, and the errors it names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab.validation.experiment import CLIENT_TIMEOUT_S, read_experiment
from servelab.validation.generator import shared_prefix_workload
from servelab.validation.hf_config import model_from_config, read_model_configs, shipped_models
from servelab.validation.yaml_subset import loads
from servelab.hw_model import LLAMA2_7B, LLAMA2_70B

RESOLVED = """\
api:
  type: completion
  streaming: true
data:
  type: shared_prefix
  shared_prefix:
    num_groups: 3
    num_prompts_per_group: 4
    system_prompt_len: 20
    question_len: 30
    output_len: 7
load:
  type: constant
  interval: 1.0
  stages:
  - rate: 2.0
    duration: 10
  - rate: 4.5
    duration: 4
  circuit_breakers: []
  request_timeout: null
server:
  type: vllm
  model_name: org/Tiny-Model
  ignore_eos: true
"""


def _latency(mean: float) -> dict[str, float]:
    return {"mean": mean, "p90": mean * 1.5, "median": mean}


def _stage(ok: int, bad: int, ttft: float) -> dict:
    return {
        "load_summary": {"count": ok + bad},
        "successes": {
            "count": ok,
            "latency": {"request_latency": _latency(1.0), "time_to_first_token": _latency(ttft),
                        "inter_token_latency": _latency(0.004), "time_per_output_token": _latency(0.004),
                        "normalized_time_per_output_token": _latency(0.01)},
            "prompt_len": {"mean": 52.0, "p10": 51.0, "p90": 53.0},
            "output_len": {"mean": 6.0},
        },
        "failures": {"count": bad, "request_latency": _latency(300.5) if bad else None, "prompt_len": None},
    }


def make_folder(root: Path, name: str = "20260101-000000-tiny-model-tp2-codegen", *, launch: bool = True,
                resolved: bool = True) -> Path:
    d = root / name
    (d / "results").mkdir(parents=True)
    if launch:
        (d / "exp-config.yaml").write_text("model: org/Tiny-Model\ntensor_parallelism: 2\nmax_model_len: 1024\n"
                                           "max_num_batched_tokens: 512\nmax_num_seqs: 8\napp: inference-perf\n")
    if resolved:
        (d / "results" / "config.yaml").write_text(RESOLVED)
    profile = {"data": {"type": "shared_prefix", "shared_prefix": {
        "num_unique_system_prompts": 5, "num_users_per_system_prompt": 2, "system_prompt_len": 20,
        "question_len": 30, "output_len": 7, "enable_multi_turn_chat": True}},
        "load": {"type": "constant", "stages": [{"rate": 1, "duration": 3}]},
        "server": {"model_name": "org/Tiny-Model", "ignore_eos": True}}
    (d / "profile.yaml").write_text(json.dumps(profile))
    (d / "results" / "stage_0_lifecycle_metrics.json").write_text(json.dumps(_stage(20, 0, 0.02)))
    (d / "results" / "stage_1_lifecycle_metrics.json").write_text(json.dumps(_stage(3, 15, 100.0)))
    return d


def test_reads_a_hand_made_folder(tmp_path):
    e = read_experiment(make_folder(tmp_path))
    assert e.name == "20260101-000000-tiny-model-tp2-codegen"
    s = e.server
    assert (s.model, s.model_name, s.tp, s.max_num_batched_tokens, s.max_num_seqs, s.max_model_len) == (
        "org/Tiny-Model", "Tiny-Model", 2, 512, 8, 1024)
    # what the configuration leaves out: vLLM V1's defaults
    assert (s.block_size, s.gpu_memory_utilization, s.chunked_prefill, s.prefix_caching) == (16, 0.9, True, True)
    # the resolved configuration wins over the profile (which asks for 5 x 2 and multi-turn)
    d = e.data
    assert (d.num_groups, d.num_prompts_per_group, d.system_prompt_len, d.question_len, d.output_len,
            d.multi_turn, d.ignore_eos) == (3, 4, 20, 30, 7, False, True)
    assert [(st.rate, st.duration_s, st.n_requests) for st in e.stages] == [(2.0, 10.0, 20), (4.5, 4.0, 18)]
    m0, m1 = e.measured
    assert (m0.requests, m0.successes, m0.failures) == (20, 20, 0)
    assert m0.latency["time_to_first_token"]["mean"] == 0.02
    assert m0.prompt_len["p90"] == 53.0
    assert (m1.successes, m1.failures) == (3, 15)
    assert not e.overloaded(0) and e.overloaded(1)
    assert e.client_timeout_s == CLIENT_TIMEOUT_S and e.streaming


def test_without_launch_file_the_tp_comes_from_the_name(tmp_path):
    e = read_experiment(make_folder(tmp_path, launch=False))
    assert e.server.tp == 2 and e.server.model == "org/Tiny-Model"
    assert (e.server.max_num_batched_tokens, e.server.max_num_seqs) == (2048, 128)  # the data's README


def test_without_resolved_config_the_profile_is_read_with_its_aliases(tmp_path):
    e = read_experiment(make_folder(tmp_path, resolved=False))
    assert (e.data.num_groups, e.data.num_prompts_per_group, e.data.multi_turn) == (5, 2, True)
    assert [(st.rate, st.duration_s) for st in e.stages] == [(1.0, 3.0)]
    with pytest.raises(ValueError, match="multi_turn=True: multi-turn chat"):
        shared_prefix_workload(e.data, e.stages, [0.0])


def test_a_missing_stage_file_is_named(tmp_path):
    d = make_folder(tmp_path)
    (d / "results" / "stage_1_lifecycle_metrics.json").unlink()
    with pytest.raises(ValueError, match="stage 1 is configured but stage_1_lifecycle_metrics.json is missing"):
        read_experiment(d)


def test_bad_values_are_named(tmp_path):
    d = make_folder(tmp_path)
    (d / "results" / "config.yaml").write_text(RESOLVED.replace("rate: 2.0", "rate: -2.0"))
    with pytest.raises(ValueError, match=r"load.stages\[0\].*rate must be a positive"):
        read_experiment(d)
    (d / "results" / "config.yaml").write_text(RESOLVED.replace("type: shared_prefix", "type: random"))
    with pytest.raises(ValueError, match="only inference-perf's 'shared_prefix'"):
        read_experiment(d)
    (d / "results" / "stage_0_lifecycle_metrics.json").write_text("{not json")
    (d / "results" / "config.yaml").write_text(RESOLVED)
    with pytest.raises(ValueError, match="stage_0_lifecycle_metrics.json: not JSON"):
        read_experiment(d)
    with pytest.raises(ValueError, match="not a folder"):
        read_experiment(tmp_path / "nowhere")


def test_yaml_subset_refuses_what_it_does_not_read():
    assert loads("a:\n- 1\n- x\nb: {}\n") == {"a": [1, "x"], "b": {}}
    for text, what in (("a: &x 1\n", "outside"), ("a: 1\na: 2\n", "appears twice"), ("a: 1\n   b: 2\n", "indentation")):
        with pytest.raises(ValueError, match=what):
            loads(text, "f.yaml")


def test_model_presets_match_the_hand_written_ones():
    models = shipped_models()
    for name, preset in (("Llama-2-7b-hf", LLAMA2_7B), ("Llama-2-70b-hf", LLAMA2_70B)):
        m = models[name]
        assert not m.moe and m.flop_ratio == 1.0
        assert m.spec.param_count == preset.param_count and m.spec.kv_bytes_per_token == preset.kv_bytes_per_token
    moe = models["Mixtral-8x7B-v0.1"]
    # all eight experts' weights (46.7 B parameters), two experts' FLOPs per token (about 12.9 B)
    assert round(moe.spec.param_count / 1e9, 1) == 46.7
    active = moe.spec.param_count - (moe.n_experts - moe.experts_per_token) * 3 * 4096 * 14336 * 32
    assert round(active / 1e9, 1) == 12.9


def test_model_configs_folder_errors(tmp_path):
    (tmp_path / "M").mkdir()
    (tmp_path / "M" / "config.json").write_text(json.dumps({"num_hidden_layers": 2, "hidden_size": 64,
                                                            "num_attention_heads": 4, "intermediate_size": 128,
                                                            "vocab_size": 100, "tie_word_embeddings": True}))
    m = read_model_configs(tmp_path)["M"]
    assert (m.spec.n_kv_heads, m.spec.d_head, m.spec.tie_embeddings) == (4, 16, True)
    with pytest.raises(ValueError, match="M config.json: num_experts_per_tok=3 is more than the 2 experts"):
        model_from_config({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                           "intermediate_size": 128, "vocab_size": 100, "num_local_experts": 2,
                           "num_experts_per_tok": 3}, "M")
    with pytest.raises(ValueError, match="not a folder"):
        read_model_configs(tmp_path / "none")
