"""``servelab validate``: the table, the JSON records, the plot, and one-line refusals."""

from __future__ import annotations

import json

import pytest

from servelab.cli import main
from servelab.validation.experiment import shipped_data_dir, shipped_experiment_dirs


def test_validate_every_shipped_run(tmp_path, capsys):
    out_json = tmp_path / "v.json"
    args = ["validate", *map(str, shipped_data_dir().iterdir()), "--calibration", "fitted", "--json", str(out_json),
            "--out", str(tmp_path / "plots")]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "skipped" in text and "README.md" in text  # DATA/* works: the README is passed over
    assert "mean absolute error over the stages not overloaded" in text and "(overloaded)" in text
    records = json.loads(out_json.read_text())
    assert len(records) == 18 * 6  # 12 experiments, 18 stages, six metrics
    assert set(records[0]) == {"experiment", "stage", "metric", "predicted", "measured"}
    assert {r["metric"] for r in records} == {"ttft_mean", "ttft_p90", "itl_mean", "tpot_mean", "e2e_mean", "e2e_p90"}
    first = [r for r in records if r["experiment"] == shipped_experiment_dirs()[0].name and r["stage"] == 0]
    assert next(r for r in first if r["metric"] == "ttft_mean")["measured"] == pytest.approx(0.025036599272001393)
    assert (tmp_path / "plots" / "validate.png").stat().st_size > 10_000


def test_one_experiment_with_the_paper_gpu(capsys):
    assert main(["validate", str(shipped_experiment_dirs()[0])]) == 0
    text = capsys.readouterr().out
    assert "the paper GPU as is" in text and "1 experiments, 2 stages simulated" in text


@pytest.mark.parametrize("args, message", [
    (["validate", "/no/such/folder"], "does not exist"),
    (["validate", "--calibration", "/no/such.json"], "cannot be read"),
    (["validate", "--seed", "-1"], "--seed must be >= 0"),
    (["validate", "--fit", "x.json", "--calibration", "fitted"], "give one"),
])
def test_refusals_are_one_line(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_an_unknown_model_is_named(tmp_path, capsys):
    (tmp_path / "Other").mkdir()
    (tmp_path / "Other" / "config.json").write_text("{}")
    assert main(["validate", str(shipped_experiment_dirs()[0]), "--model-configs", str(tmp_path)]) == 2
    assert "missing 'num_hidden_layers'" in capsys.readouterr().err
    (tmp_path / "Other" / "config.json").unlink()
    assert main(["validate", str(shipped_experiment_dirs()[0]), "--model-configs", str(tmp_path)]) == 2
    assert "'Llama-2-7b-hf', which has no config.json" in capsys.readouterr().err


def test_no_experiment_among_the_arguments(tmp_path, capsys):
    (tmp_path / "README.md").write_text("x")
    assert main(["validate", str(tmp_path / "README.md")]) == 2
    assert "no experiment folder" in capsys.readouterr().err


def test_fit_and_leave_one_model_out_flags(tmp_path, capsys, monkeypatch):
    # the fits themselves take minutes (tests/test_validation_calibration.py runs a small one):
    # here they return the shipped ones, and the command's own work is checked
    from servelab.validation import fit as fit_module
    from servelab.validation.calibration import fits_dir, load_calibration

    def shipped_fit(experiments, models, **kw):
        return fit_module.FitResult(load_calibration("fitted"), 0.0, 0, ())

    def shipped_held_out(experiments, models, **kw):
        names = sorted({e.server.model_name for e in experiments})
        return {n: fit_module.FitResult(load_calibration(fits_dir() / f"without-{n}.json"), 0.0, 0, ()) for n in names}

    monkeypatch.setattr(fit_module, "fit_calibration", shipped_fit)
    monkeypatch.setattr(fit_module, "leave_one_model_out", shipped_held_out)
    out = tmp_path / "mine.json"
    assert main(["validate", "--fit", str(out), "--leave-one-model-out"]) == 0
    text = capsys.readouterr().out
    assert f"wrote {out}" in text and "leave-one-model-out" in text and "held out" in text
    assert json.loads(out.read_text())["allreduce"] == "one_shot"


def test_a_model_configs_folder_beside_the_experiments_is_read(tmp_path, capsys):
    """The shared data's layout, ``DATA/*`` with a model servelab does not ship: its config in
    ``DATA/model_configs`` is found without ``--model-configs``, and the run is the one its
    shape gives (here the 7B's shape under another name: the 7B's predictions)."""
    import shutil

    source = shipped_experiment_dirs()[0]
    data = tmp_path / "data"
    renamed = data / "renamed-run"
    shutil.copytree(source, renamed)
    config = renamed / "exp-config.yaml"
    text = config.read_text()
    assert "meta-llama/Llama-2-7b-hf" in text
    config.write_text(text.replace("meta-llama/Llama-2-7b-hf", "someone/Renamed-7b"))
    assert main(["validate", *map(str, data.iterdir())]) == 2
    assert "'Renamed-7b', which has no config.json" in capsys.readouterr().err
    (data / "model_configs" / "Renamed-7b").mkdir(parents=True)
    shutil.copyfile(shipped_data_dir() / "model_configs" / "Llama-2-7b-hf" / "config.json",
                    data / "model_configs" / "Renamed-7b" / "config.json")
    assert main(["validate", *map(str, data.iterdir()), "--json", str(tmp_path / "renamed.json")]) == 0
    assert main(["validate", str(source), "--json", str(tmp_path / "original.json")]) == 0
    renamed_records = json.loads((tmp_path / "renamed.json").read_text())
    original = json.loads((tmp_path / "original.json").read_text())
    assert [r["experiment"] for r in renamed_records] == ["renamed-run"] * len(original)
    assert [r["predicted"] for r in renamed_records] == [r["predicted"] for r in original]
