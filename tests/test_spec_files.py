"""Models and GPUs by preset name or spec file (servelab.spec_files), as ``Grid`` and
``servelab sweep --model/--gpu`` take them."""

from __future__ import annotations

import dataclasses
import json
import textwrap

import pytest

from servelab import cli
from servelab import hw_model as hw
from servelab import spec_files
from servelab import sweep as sw
from servelab.spec_files import gpu_presets, model_presets, resolve_gpu, resolve_model

# the module's own documented example (so the example a reader copies is the one tested), named
MISTRAL_TOML = 'name = "Mistral-7B"\n' + textwrap.dedent(
    spec_files.__doc__.split("# mistral-7b.toml\n", 1)[1].split("\n\n", 1)[0]) + "\n"
MISTRAL = hw.ModelSpec("Mistral-7B", 32, 4096, 32, 8, 128, 14336, 32000)
SLOW_GPU = hw.GpuSpec("slow", peak_flops=100e12, hbm_bandwidth=1e12, memory_bytes=40e9)


def test_presets_are_hw_models_by_either_name():
    assert model_presets() == {"LLAMA3_8B": hw.LLAMA3_8B, "LLAMA3_70B": hw.LLAMA3_70B, "LLAMA2_7B": hw.LLAMA2_7B,
                               "LLAMA2_13B": hw.LLAMA2_13B, "LLAMA2_70B": hw.LLAMA2_70B, "LLAMA32_1B": hw.LLAMA32_1B}
    assert gpu_presets() == {"H100": hw.H100, "H200": hw.H200, "A100_80GB": hw.A100_80GB,
                             "H100_FP8": hw.H100_FP8, "H200_FP8": hw.H200_FP8}
    for name in ("LLAMA3_70B", "Llama-3-70B", "llama3_70b"):
        assert resolve_model(name) is hw.LLAMA3_70B
    for name in ("H100", "H100-SXM", "h100sxm"):
        assert resolve_gpu(name) is hw.H100
    assert resolve_model(MISTRAL) is MISTRAL


def test_a_toml_and_a_json_file_give_the_same_spec(tmp_path):
    (tmp_path / "m.toml").write_text(MISTRAL_TOML)
    (tmp_path / "m.json").write_text(json.dumps(dataclasses.asdict(MISTRAL)))
    assert resolve_model(tmp_path / "m.toml") == MISTRAL == resolve_model(str(tmp_path / "m.json"))
    # one file for both, in [model] and [gpu] tables; a missing name is the file's stem
    (tmp_path / "rig.toml").write_text(f"[model]\n{MISTRAL_TOML}\n[gpu]\npeak_flops = 100e12\n"
                                       "hbm_bandwidth = 1e12\nmemory_bytes = 40e9\n")
    assert resolve_model(tmp_path / "rig.toml") == MISTRAL
    assert resolve_gpu(tmp_path / "rig.toml") == dataclasses.replace(SLOW_GPU, name="rig")


@pytest.mark.parametrize("text, message", [
    (MISTRAL_TOML + "d_mod = 1\n", "unknown field 'd_mod'; a model has name, n_layers, d_model"),
    (MISTRAL_TOML.replace("d_ff = 14336\n", ""), "missing field(s) d_ff"),
    (MISTRAL_TOML.replace("d_ff = 14336", "d_ff = 14336.5"), "field d_ff must be an integer, got 14336.5"),
    (MISTRAL_TOML.replace("d_ff = 14336", "d_ff = true"), "field d_ff must be an integer, got True"),
    (MISTRAL_TOML.replace("n_kv_heads = 8", "n_kv_heads = 7"), "n_heads must be a multiple of n_kv_heads"),
    ("n_layers = = 3", "is not valid TOML"),
])
def test_bad_model_files_say_what_is_wrong(tmp_path, text, message):
    path = tmp_path / "m.toml"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        resolve_model(path, "--model")
    assert str(info.value).startswith(f"--model: spec file '{path}'")
    assert message in str(info.value)


def test_missing_files_and_wrong_types(tmp_path):
    with pytest.raises(ValueError, match="cannot read spec file .*nope.json"):
        resolve_gpu(tmp_path / "nope.json")
    with pytest.raises(ValueError, match="gpu must be a preset .* got 'gpu.yaml'"):
        resolve_gpu("gpu.yaml")
    with pytest.raises(TypeError, match="model must be a ModelSpec, a preset .* got 8"):
        resolve_model(8)  # type: ignore[arg-type]
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="must hold a table of fields, got list"):
        resolve_model(tmp_path / "list.json")


def test_grid_takes_presets_specs_and_files(tmp_path):
    (tmp_path / "m.toml").write_text(MISTRAL_TOML)
    g = sw.Grid(policies=("batch1",), rates=(0.5,), model=tmp_path / "m.toml", gpu="A100_80GB")
    assert (g.model, g.gpu) == (MISTRAL, hw.A100_80GB)
    with pytest.raises(ValueError, match="model Llama-3-70B does not fit gpu A100-80GB"):
        sw.Grid(policies=("batch1",), rates=(0.5,), model="LLAMA3_70B", gpu="A100_80GB")


def test_the_gpu_reaches_the_simulator():
    # a slower GPU serves the same requests later: every TTFT percentile grows
    fast = sw.sweep(sw.Grid(policies=("batch1",), rates=(0.3,)), n=50).rows[0]
    slow = sw.sweep(sw.Grid(policies=("batch1",), rates=(0.3,), gpu=SLOW_GPU), n=50).rows[0]
    assert slow.ttft_p50_s > fast.ttft_p50_s and slow.utilisation > fast.utilisation
    on_a100 = sw.sweep(sw.Grid(policies=("batch1",), rates=(0.3,), gpu="A100_80GB"), n=50).rows[0]
    assert on_a100.ttft_p50_s > fast.ttft_p50_s


def test_cli_sweep_with_a_model_file_and_a_gpu_preset(tmp_path, capsys):
    spec = tmp_path / "mistral.toml"
    spec.write_text(MISTRAL_TOML)
    out = tmp_path / "out"
    assert cli.main(["sweep", "--model", str(spec), "--gpu", "H200", "--policy", "batch1", "--rates", "0.5",
                     "--n", "30", "--out", str(out), "--no-plots"]) == 0
    assert "Sweep: Mistral-7B on H200" in capsys.readouterr().out
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["model"]["name"] == "Mistral-7B" and doc["gpu"]["name"] == "H200"
    assert doc["model"]["vocab_size"] == 32000


def test_cli_model_file_errors_name_the_flag(tmp_path, capsys):
    spec = tmp_path / "bad.json"
    spec.write_text('{"n_layers": 2}')
    assert cli.main(["sweep", "--model", str(spec), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"servelab sweep: error: --model: spec file '{spec}': missing field(s) d_model")
    assert err.count("\n") == 1
