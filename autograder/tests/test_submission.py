"""Only the manifest's edit files are taken from a submission, never through a symlink, and a
zip cannot write outside its folder."""

from __future__ import annotations

import os
import zipfile

import pytest

from autograder.grading.submission import SubmissionError, collect, find_file, unpack


def test_layouts_in_order_of_preference(tmp_path):
    for rel in ("assignments/a1_ledger/ledger.py", "a1_ledger/ledger.py", "elsewhere/ledger.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    assert find_file(tmp_path, "a1_ledger/ledger.py") == tmp_path / "assignments/a1_ledger/ledger.py"
    os.remove(tmp_path / "assignments/a1_ledger/ledger.py")
    assert find_file(tmp_path, "a1_ledger/ledger.py") == tmp_path / "a1_ledger/ledger.py"


def test_two_loose_files_of_the_same_name_are_ambiguous(tmp_path):
    for rel in ("x/ledger.py", "y/ledger.py"):
        (tmp_path / rel).parent.mkdir(parents=True)
        (tmp_path / rel).write_text("")
    assert "missing file" in collect(tmp_path, ("a1_ledger/ledger.py",))


def test_a_symlink_is_never_followed(tmp_path):
    secret = tmp_path / "secret.py"
    secret.write_text("answers")
    (tmp_path / "sub" / "a1_ledger").mkdir(parents=True)
    (tmp_path / "sub" / "a1_ledger" / "ledger.py").symlink_to(secret)
    assert find_file(tmp_path / "sub", "a1_ledger/ledger.py") is None


def test_a_plain_zip_of_a_folder_is_graded_as_that_folder(tmp_path):
    archive = tmp_path / "ok.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("repo/a1_ledger/ledger.py", "ok")
        z.writestr("repo/notes/", "")
    root = unpack(archive, tmp_path / "into")
    assert root == tmp_path / "into" / "repo"
    assert (root / "a1_ledger" / "ledger.py").read_text() == "ok"


def _symlink_entry(name: str, target: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = (0o120777 << 16)
    return info


@pytest.mark.parametrize("entries, named, why", [
    ([("../escaped.py", "x"), ("a1_ledger/ledger.py", "ok")], "../escaped.py", "climbs out"),
    ([("a1_ledger/../../escaped.py", "x")], "a1_ledger/../../escaped.py", "climbs out"),
    ([("/abs.py", "x")], "/abs.py", "absolute"),
    ([("notes", "x"), ("notes/a1_ledger/ledger.py", "y")], "notes/a1_ledger/ledger.py", "inside 'notes'"),
    ([("notes/a1_ledger/ledger.py", "y"), ("notes", "x")], "notes", "a folder of the same name"),
    ([("a1_ledger/ledger.py", "x"), ("a1_ledger/ledger.py", "y")], "a1_ledger/ledger.py", "appears twice"),
    ([("a1_ledger/ledger.py", "x"), ("a1_ledger//ledger.py", "y")], "a1_ledger//ledger.py", "appears twice"),
    ([("x/", ""), ("x", "file")], "x", "a folder of the same name"),
    ([(_symlink_entry("a1_ledger/ledger.py", "/etc/passwd"), "/etc/passwd")], "a1_ledger/ledger.py", "symbolic link"),
])
def test_an_ambiguous_zip_is_refused_naming_the_entry(tmp_path, entries, named, why):
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for name, data in entries:
            z.writestr(name, data)
    with pytest.raises(SubmissionError) as err:
        unpack(archive, tmp_path / "into")
    assert repr(named) in str(err.value) and why in str(err.value), str(err.value)
    assert not (tmp_path / "escaped.py").exists()


def test_bad_submissions_are_named(tmp_path):
    with pytest.raises(SubmissionError, match="not found"):
        unpack(tmp_path / "nope", tmp_path / "into")
    (tmp_path / "f.zip").write_text("not a zip")
    with pytest.raises(SubmissionError, match="folder or a .zip"):
        unpack(tmp_path / "f.zip", tmp_path / "into")


def test_grading_the_checkout_itself_leaves_its_venv_readable():
    # `grade .`: the submission is the course copy, whose .venv holds numpy; the child may read
    # the venv and nothing else of it
    import sys
    from pathlib import Path

    from autograder.grading.grade import ROOT, forbidden_paths
    venv = Path(sys.prefix).resolve()
    forbidden = forbidden_paths(ROOT, [ROOT])
    assert not [p for p in forbidden if p == venv or p in venv.parents], "the venv (or a folder above it) is forbidden"
    assert (ROOT / "assignments").resolve() in forbidden and (ROOT / "autograder").resolve() in forbidden
