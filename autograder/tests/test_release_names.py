"""A release checks its own words (autograder/release/names.py): in both kinds of release, every
path, make target and task that the README, the assignments' READMEs and the Makefile name is
there; each named target runs (``make -n``: no "No rule to make target"); and the check fails
when a README names a file the release lacks, a target it does not define, or when the task
table leaves out a task."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from autograder.grading.grade import ROOT
from autograder.release.names import dead_names, named_targets
from autograder.release.repository import WHEELS, plan

KINDS = {"staff": False, "readable": True}


@pytest.fixture(scope="module", params=sorted(KINDS))
def release_files(request) -> dict[str, str | None]:
    """The release's files: path -> its text (None for a file not read as text)."""
    files: dict[str, str | None] = {}
    for rel, text in plan(ROOT, KINDS[request.param]).items():
        if text is None and (rel.endswith(".md") or rel == "Makefile"):
            text = (ROOT / rel).read_text(encoding="utf-8")
        files[rel] = text
    if not KINDS[request.param]:  # a staff release's wheels are added by `release --wheels`
        files[WHEELS + "servelab-0.1.0-cp312-abi3-manylinux_2_17_x86_64.whl"] = None
    return files


def test_every_name_in_the_docs_is_in_the_release(release_files):
    assert dead_names(release_files) == []


def test_the_check_fails_on_what_the_release_lacks(release_files):
    broken = dict(release_files)
    broken["assignments/a1_ledger/README.md"] = (broken["assignments/a1_ledger/README.md"]
                                                + "\nSee `notes/ledger_hints.md` and run `make hints`.\n")
    table = broken["assignments/README.md"]
    assert table is not None
    broken["assignments/README.md"] = "\n".join(line for line in table.splitlines()
                                                if not line.startswith("| `a12_tensor_parallel/`"))
    broken["README.md"] = (broken["README.md"] or "") + "\nThe workflow is `.github/workflows/nightly.yml`.\n"
    assert dead_names(broken) == [
        "README.md: names .github/workflows/nightly.yml, which the release lacks",
        "assignments/a1_ledger/README.md: names notes/ledger_hints.md, which the release lacks",
        "assignments/a1_ledger/README.md: names `make hints`, which the release's Makefile does not define",
        "assignments/README.md: its task table lacks a12_tensor_parallel",
    ]


def test_the_task_table_lists_every_task(release_files):
    from servelab.harness.manifest import Manifest
    table = release_files["assignments/README.md"] or ""
    manifest = Manifest.from_toml(release_files["assignments/manifest.toml"] or "")
    assert len(manifest.tasks) == 14
    assert all(f"| `{t.id}/` |" in table for t in manifest.tasks)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_each_named_target_runs_dry(release_files, tmp_path):
    for rel, text in release_files.items():
        dst = tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if text is not None:
            dst.write_text(text, encoding="utf-8")
        elif (ROOT / rel).is_file():
            shutil.copyfile(ROOT / rel, dst)
        else:
            dst.write_bytes(b"")  # the stand-in wheel
    targets = named_targets(release_files)
    assert {"build", "check", "test", "notebooks"} <= targets, targets
    for target in sorted(targets):
        run = subprocess.run(["make", "-n", target], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0 and "No rule to make target" not in run.stderr, (target, run.stderr[-2000:])
