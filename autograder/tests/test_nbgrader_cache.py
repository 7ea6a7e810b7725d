"""nbgrader's generated course is made once per content of the source notebooks and kept in the
course's ``autograder/.nbgrader-cache/`` (:func:`autograder.notebooks.generation.generated`):
a later process (a grade-all worker, the next ``grade``) uses it without running nbgrader,
and a folder there that is not safely the grader's own is never used."""

from __future__ import annotations

import os
import subprocess
import sys

from autograder.grading.grade import ROOT
from autograder.notebooks import generation, nbgrader

# a process that must not run nbgrader: generate() raises there
SECOND_PROCESS = """
import sys
from pathlib import Path
from autograder.notebooks import generation
def refuse(*args, **kwargs):
    raise SystemExit("nbgrader's generate step ran again")
generation.generate = refuse
if sys.argv[1] == "no-cache":
    generation._cache_folder = lambda root: None
print(generation.generated(Path(sys.argv[2])))
"""


def _second_process(how: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SECOND_PROCESS, how, str(ROOT)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_second_process_uses_the_kept_course_without_running_nbgrader():
    here = nbgrader.generated(ROOT)
    assert (here / "gradebook.db").is_file() and ROOT / generation.CACHE in here.parents, here
    second = _second_process("cache")
    assert second.returncode == 0, second.stderr[-2000:]
    assert second.stdout.strip() == str(here)


def test_control_without_the_kept_course_a_second_process_runs_nbgrader_again():
    nbgrader.generated(ROOT)
    second = _second_process("no-cache")
    assert second.returncode != 0 and "generate step ran again" in second.stderr, second.stderr[-2000:]


def test_a_cache_folder_that_is_a_link_or_open_to_others_is_not_used(tmp_path):
    root = tmp_path / "course"
    (root / "autograder").mkdir(parents=True)
    os.chmod(root / "autograder", 0o755)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    cache = root / generation.CACHE
    cache.symlink_to(elsewhere)  # planted: a link is never followed
    assert generation._cache_folder(root) is None
    cache.unlink()
    cache.mkdir()
    os.chmod(cache, 0o777)  # anybody could swap an entry
    assert generation._cache_folder(root) is None
    os.chmod(cache, 0o700)
    assert generation._cache_folder(root) == cache  # the control: the grader's own folder is used
    os.chmod(root / "autograder", 0o777)  # its parent open to all: the folder could be replaced
    assert generation._cache_folder(root) is None
