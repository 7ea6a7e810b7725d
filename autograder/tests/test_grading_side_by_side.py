"""``grade`` with ``jobs`` > 1 (the CLI's default: the cores) grades tasks side by side, each in
a worker process with a sandbox uid of its own, and the notebooks beside them: the same
results.json as one task after the other, the same time budgets, a calibration that runs as
many children at once as the grading runs tasks, and no notebook kernel while a task's child
still runs."""

from __future__ import annotations

import json
import subprocess
import time
import sys
from pathlib import Path

import pytest

from autograder.__main__ import main
from autograder.grading import calibrate
from autograder.grading import grade as grade_module
from autograder.grading.grade import grade
from autograder.sandbox.remote import Limits
from autograder.selfcheck import reference_submission

# quick tasks and one notebook: enough for two workers and the notebooks' thread
SOME = frozenset({"a1_ledger", "a11_speculative", "a13_parallel_plan", "a14_host_tier", "nb01_ledger_70b"})


_FORK_OR_SPAWN = """
import threading
from autograder.grading.grade import _worker_context
alone = _worker_context().get_start_method()
stop = threading.Event()
other = threading.Thread(target=stop.wait)
other.start()
beside = _worker_context().get_start_method()
stop.set()
other.join()
print(alone, beside)
"""


def test_workers_are_forked_only_from_a_process_with_no_other_thread():
    # a forked copy of a lock another thread holds would stay held in the worker: with a second
    # thread alive, the workers are spawned (asked in a fresh process: this one may run other
    # threads, the self-check's in a whole run of these tests)
    run = subprocess.run([sys.executable, "-c", _FORK_OR_SPAWN], capture_output=True, text=True, timeout=120,
                         cwd=grade_module.ROOT)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["fork", "spawn"]


def test_tasks_side_by_side_give_the_results_of_one_after_the_other(tmp_path):
    sub = reference_submission(tmp_path / "ref", with_notebooks=True)
    limits = Limits(wall_s=30.0, cpu_s=30)
    apart = grade(sub, limits=limits, only_tasks=SOME, jobs=2)
    together = grade(sub, limits=limits, only_tasks=SOME, jobs=1)
    assert json.dumps(apart, sort_keys=True) == json.dumps(together, sort_keys=True)
    graded = [t for t in apart["tests"] if t["extra_data"]["task"] in SOME]
    assert graded and all(t["score"] == t["max_score"] for t in graded if "pending" not in t["output"]), \
        [t["output"][:200] for t in graded if t["score"] < t["max_score"]]


SLEEPY = """import time


def __getattr__(name):  # every function the tests call takes at least 1 s
    def slow(*args, **kwargs):
        time.sleep(1.0)
        return 0
    return slow
"""


def test_side_by_side_a_task_stops_when_its_budget_is_spent(tmp_path, monkeypatch):
    """As one after the other (test_child_io.py): a1's budget (0.3 s a test and half a 6 s
    limit) is spent before its sixth test, in a worker process too."""
    for rel in ("a1_ledger/ledger.py", "a13_parallel_plan/plan.py"):
        (tmp_path / "sleepy" / rel).parent.mkdir(parents=True)
        (tmp_path / "sleepy" / rel).write_text(SLEEPY)
    monkeypatch.setattr(grade_module, "BUDGET_PER_TEST_S", 0.3)  # read here, in the process that hands out budgets
    monkeypatch.setattr(grade_module, "RESERVE_LIMITS", 0.5)
    data = grade(tmp_path / "sleepy", limits=Limits(wall_s=6.0, cpu_s=6), time_factor=1.0,
                 only_tasks=frozenset({"a1_ledger", "a13_parallel_plan"}), jobs=2)
    a1 = [t["output"] for t in data["tests"] if t["extra_data"]["task"] == "a1_ledger"]
    assert a1[5].startswith("not run: this task's time budget"), a1


def test_no_kernel_starts_before_every_task_child_has_ended(tmp_path, monkeypatch):
    """The notebooks' rechecks run beside the tasks, nbgrader's kernels after them: a kernel runs
    the hidden tests, and a task's child beside it shows its errors in visible tests (a kernel
    sent hidden lines to one through file locks; timing would carry them too). nbgrader is
    replaced here by a stand-in that notes when it would start the kernels."""
    for rel in ("a1_ledger/ledger.py", "a13_parallel_plan/plan.py"):
        (tmp_path / "sleepy" / rel).parent.mkdir(parents=True)
        (tmp_path / "sleepy" / rel).write_text(SLEEPY)
    events = []
    real_tasks = grade_module._grade_tasks

    def tasks(*args, **kwargs):
        out = real_tasks(*args, **kwargs)
        events.append("tasks ended")
        return out

    def autograde(root, files, work, limits, forbidden, before_kernels=None, **kwargs):
        events.append("rechecks")
        if before_kernels is not None:
            before_kernels()
        events.append("kernels")
        return grade_module.nbgrader.not_graded(root, "a stand-in for nbgrader")

    monkeypatch.setattr(grade_module, "_grade_tasks", tasks)
    monkeypatch.setattr(grade_module.nbgrader, "autograde", autograde)
    monkeypatch.setattr(grade_module, "BUDGET_PER_TEST_S", 0.3)
    monkeypatch.setattr(grade_module, "RESERVE_LIMITS", 0.5)
    grade(tmp_path / "sleepy", limits=Limits(wall_s=6.0, cpu_s=6), time_factor=1.0,
          only_tasks=frozenset({"a1_ledger", "a13_parallel_plan", "nb01_ledger_70b"}), jobs=2)
    assert events == ["rechecks", "tasks ended", "kernels"]


def test_a_bad_jobs_is_named(capsys):
    with pytest.raises(ValueError, match="jobs must be a whole number >= 1, got 0"):
        grade(grade_module.ROOT, jobs=0)
    with pytest.raises(SystemExit) as exited:
        main(["grade", ".", "--jobs", "0"])
    assert exited.value.code == 2 and "--jobs must be at least 1, got 0" in capsys.readouterr().err


def test_the_calibration_times_as_many_children_as_the_grading_runs_at_once(monkeypatch):
    started = []
    popen = calibrate.subprocess.Popen

    def counted(*args, **kwargs):
        started.append(args[0])
        return popen(*args, **kwargs)

    monkeypatch.setattr(calibrate.subprocess, "Popen", counted)
    cal = calibrate.measure(side_by_side=3)
    assert len(started) == 3 and all(argv[-1] == calibrate.WORKLOAD for argv in started)
    assert cal.factor >= 1.0 and cal.cpu_factor >= 1.0 and cal.wall_s > 0


STAND_IN_GRADER = """
import multiprocessing, os, sys, time
from concurrent.futures import ProcessPoolExecutor
from autograder.grading.grade import _die_with

if __name__ == "__main__":
    init = dict(initializer=_die_with, initargs=(os.getpid(),)) if sys.argv[1] == "die-with" else {}
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), **init)
    print(pool.submit(os.getpid).result(), flush=True)
    time.sleep(60)
"""


def _worker_outlives_its_grader(how: str, tmp_path) -> bool:
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "grader.py"
    script.write_text(STAND_IN_GRADER)
    grader = subprocess.Popen([sys.executable, str(script), how], stdout=subprocess.PIPE, text=True,
                              cwd=grade_module.ROOT, env={**os.environ, "PYTHONPATH": str(grade_module.ROOT)})
    assert grader.stdout is not None
    worker = int(grader.stdout.readline())
    grader.kill()
    grader.wait()
    deadline = time.monotonic() + 3  # the signal kills at once; without it a worker waits for work
    while time.monotonic() < deadline:
        try:  # gone, or a zombie its new parent has not reaped yet
            if Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return False
        except (FileNotFoundError, ProcessLookupError):
            return False
        time.sleep(0.1)
    os.kill(worker, signal.SIGKILL)
    return True


def test_a_task_worker_dies_with_the_grader_that_started_it(tmp_path):
    assert not _worker_outlives_its_grader("die-with", tmp_path)


def test_control_without_the_parent_death_signal_a_worker_outlives_its_grader(tmp_path):
    assert _worker_outlives_its_grader("plain", tmp_path)



def test_nbgrader_starts_no_kernel_before_the_grader_says_go(tmp_path):
    """The real runner, started early (launch.run_nbgrader's ``before``): it does nothing that
    could start a kernel until ``before`` has returned and it has read the go line; the control
    without ``before`` goes on at once."""
    from autograder.notebooks import launch

    def finished(course):
        return (course / "autograde.json").exists() or "Traceback" in (course / "autograde.log").read_text()

    seen = []

    def before():
        time.sleep(4)  # nbgrader imports in about 1.5 s: by now it would have gone on
        seen.append(finished(tmp_path / "waits"))

    for name, wait in (("waits", before), ("control", None)):
        (tmp_path / name).mkdir()
        launch.run_nbgrader(tmp_path / name, {"action": "autograde", "notebooks": []}, timeout_s=120,
                            subject="test", before=wait)
        seen.append(finished(tmp_path / name))
    assert seen == [False, True, True]


# the four notebooks: three run code (two lanes where kernels have mount namespaces), one holds
# written answers only (no kernel)
NOTEBOOK_IDS = frozenset(nb.id for nb in grade_module.nbgrader.notebooks_of(grade_module.ROOT))


def _course_folders_of_each_run(monkeypatch) -> list[set[str]]:
    """The nbgrader course folders each autograde run of the notebooks hands its runner."""
    from autograder.notebooks import autograding

    runs: list[set[str]] = []
    real = autograding.run_nbgrader

    def noted(course, cfg, *args, **kwargs):
        runs.append({job["course"] for job in cfg.get("notebooks", [])})
        return real(course, cfg, *args, **kwargs)

    monkeypatch.setattr(autograding, "run_nbgrader", noted)
    return runs


def test_notebooks_in_lanes_give_the_results_and_kept_notebooks_of_one_at_a_time(tmp_path, monkeypatch):
    """With two jobs the notebooks that run code are graded in three lanes at once, each its own
    course folder (where each kernel has a mount namespace: never uid-only, whose kernels share
    one uid); results.json and the kept notebooks are those of one notebook at a time."""
    from autograder.sandbox import os_boundary

    runs = _course_folders_of_each_run(monkeypatch)
    sub = reference_submission(tmp_path / "ref", with_notebooks=True)
    limits = Limits(wall_s=30.0, cpu_s=30)
    apart = grade(sub, limits=limits, only_tasks=NOTEBOOK_IDS, jobs=2, notebooks_out=tmp_path / "apart")
    together = grade(sub, limits=limits, only_tasks=NOTEBOOK_IDS, jobs=1, notebooks_out=tmp_path / "together")
    # three notebooks run code: a lane each with two jobs (one more than the jobs), under bwrap
    assert [len(run) for run in runs] == [3 if os_boundary.boundary().bwrap else 1, 1]
    assert json.dumps(apart, sort_keys=True) == json.dumps(together, sort_keys=True)
    cells = [t for t in apart["tests"] if t["extra_data"]["task"] in NOTEBOOK_IDS]
    assert cells and all(t["score"] == t["max_score"] for t in cells if t["extra_data"]["kind"] == "auto")
    kept = sorted(p.name for p in (tmp_path / "together").iterdir())
    assert kept == sorted(p.name for p in (tmp_path / "apart").iterdir()) and len(kept) == len(NOTEBOOK_IDS)
    for name in kept:
        outputs = [[_shown(c) for c in json.loads((tmp_path / d / name).read_text())["cells"]] for d in ("apart", "together")]
        assert outputs[0] == outputs[1], name


def _shown(cell: dict) -> list[str]:
    """What a kept cell shows: its printed text whole (a kernel sends it in chunks as they come),
    and its other outputs."""
    outputs = cell.get("outputs", [])
    text = "".join("".join(o.get("text", "")) for o in outputs if o.get("output_type") == "stream")
    return [text, *(json.dumps(o, sort_keys=True) for o in outputs if o.get("output_type") != "stream")]


def test_a_notebook_whose_kernel_dies_fails_alone_in_its_lane(tmp_path):
    """ex06 and ex10 in two lanes: ex06's kernel ends itself, ex10 keeps every point."""
    from autograder.notebooks import nbgrader

    sub = reference_submission(tmp_path / "ref", with_notebooks=True)
    fanout = next(nb for nb in nbgrader.notebooks_of(grade_module.ROOT) if nb.name == "ex06_tail_fanout")
    path = sub / "assignments" / fanout.file
    data = json.loads(path.read_text())
    for cell in data["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "ex06_a_answer":
            cell["source"] = "import os\nos._exit(0)\n" + "".join(cell["source"])
    path.write_text(json.dumps(data))
    ids = frozenset({"nb06_tail_fanout", "nb10_batch_invariance"})
    result = grade(sub, limits=Limits(wall_s=30.0, cpu_s=30), only_tasks=ids, jobs=2)
    got = {t["extra_data"]["cell"]: (t["score"], t["max_score"], t["output"]) for t in result["tests"]
           if t["extra_data"]["task"] in ids and t["extra_data"]["kind"] == "auto"}
    assert all(score == most for cell, (score, most, _) in got.items() if cell.startswith("ex10")), got
    hidden = [out for cell, (_, _, out) in got.items() if cell.startswith("ex06") and "Kernel died" in out]
    assert hidden, got


def test_a_notebook_of_written_answers_runs_no_kernel(tmp_path):
    """ex08 (the Orca paper card) has no code cell: a code cell a student adds there runs
    nowhere, and its manual cells still wait for the TAs. The control: the same cell added to
    ex01, which runs code, did run (its kept copy shows what it printed)."""
    from autograder.notebooks.cells import runs_code

    sub = reference_submission(tmp_path / "ref", with_notebooks=True)
    printing = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                "source": "print('THIS CELL ' + 'RAN')"}
    for name in ("ex08_orca_card", "ex01_ledger_70b"):
        path = sub / "assignments" / "notebooks" / f"{name}.ipynb"
        data = json.loads(path.read_text())
        data["cells"].insert(1, printing)
        path.write_text(json.dumps(data))
    ids = frozenset({"nb08_orca_card", "nb01_ledger_70b"})
    result = grade(sub, limits=Limits(wall_s=30.0, cpu_s=30), only_tasks=ids, notebooks_out=tmp_path / "kept")
    assert "THIS CELL RAN" not in (tmp_path / "kept" / "ex08_orca_card.ipynb").read_text()
    assert "THIS CELL RAN" in (tmp_path / "kept" / "ex01_ledger_70b.ipynb").read_text()
    card = [t for t in result["tests"] if t["extra_data"]["task"] == "nb08_orca_card"]
    assert card and all(t["score"] == 0 and "pending" in t["output"] for t in card)
    assert not runs_code(grade_module.ROOT / "assignments" / "notebooks" / "ex08_orca_card.ipynb")


_BARRIER_LANE = """
import json, os, sys, time
from pathlib import Path
from autograder.notebooks import runner

here = Path(sys.argv[1])
runner._scores = lambda cfg, db, names: {name: {} for name in names}


class Api:  # each lane's notebook waits until the other lane's has begun: one after the other, neither would
    def __init__(self, job):
        self.job, self.coursedir = job, type("C", (), {})()

    def autograde(self, *args, **kwargs):
        (here / f"began-{self.job['name']}").touch()
        other = here / f"began-{'b' if self.job['name'] == 'a' else 'a'}"
        end = time.monotonic() + 60
        while not other.exists() and time.monotonic() < end:
            time.sleep(0.02)
        return {"success": other.exists(), "log": "the other lane never began"}


jobs = [{"name": name, "base": str(here / name), "course": str(here / f"course-{name}")} for name in "ab"]
for job in jobs:
    os.mkdir(job["base"])
cfg = {"out": str(here / "out.json"), "assignment": "notebooks", "student": "student"}
print(json.dumps(runner._side_by_side(cfg, [[job] for job in jobs], Api)))
"""


def test_the_runner_runs_its_lanes_at_once(tmp_path):
    """The runner's lanes are processes running at the same time: each lane's notebook waits
    for the other's to begin, which one after the other would never see (a stand-in for
    nbgrader's autograde; the gradebook is not read)."""
    run = subprocess.run([sys.executable, "-c", _BARRIER_LANE, str(tmp_path)], capture_output=True, text=True,
                         timeout=180, cwd=grade_module.ROOT)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1]) == {"success": True, "failed": {}, "notebooks": {"a": {}, "b": {}}}


# ex01's kernel tries to leave a file in every other kernel's TMPDIR while ex06's kernel, in the
# other lane at the same time, watches its own for one (each for at most `window` seconds; only in
# a kernel: the grader's recheck runs the answer cells too, before any kernel)
PLANTER = """import glob, os, pathlib, sys, time
_own = pathlib.Path(os.environ["TMPDIR"])
_planted, _end = False, time.monotonic() + {window}
while "ipykernel" in sys.modules and not _planted and time.monotonic() < _end:
    for _tmp in glob.glob(str(_own.parents[1] / "*" / "tmp")):
        if pathlib.Path(_tmp) != _own:
            try:
                (pathlib.Path(_tmp) / "planted-by-ex01").write_text("x")
                _planted = True
            except OSError:
                pass
    time.sleep(0.05)
print("PLANTED" if _planted else "NOT" + " PLANTED")
"""
WATCHER = """import os, pathlib, sys, time
_mine, _end = pathlib.Path(os.environ["TMPDIR"]) / "planted-by-ex01", time.monotonic() + {window}
while "ipykernel" in sys.modules and not _mine.exists() and time.monotonic() < _end:
    time.sleep(0.05)
print("FOUND" + " A PLANT" if _mine.exists() else "NO" + " PLANT")
"""


def _two_lanes_one_plants(tmp_path: Path, window: int) -> tuple[str, str]:
    from autograder.notebooks import nbgrader

    sub = reference_submission(tmp_path / "ref", with_notebooks=True)
    for name, cell_id, code in (("ex01_ledger_70b", "ex01_a_answer", PLANTER), ("ex06_tail_fanout", "ex06_a_answer", WATCHER)):
        path = sub / "assignments" / "notebooks" / f"{name}.ipynb"
        data = json.loads(path.read_text())
        for cell in data["cells"]:
            if cell["metadata"].get("nbgrader", {}).get("grade_id") == cell_id:
                cell["source"] = code.format(window=window) + "".join(cell["source"])
        path.write_text(json.dumps(data))
    ids = frozenset({"nb01_ledger_70b", "nb06_tail_fanout"})
    assert {nb.id for nb in nbgrader.notebooks_of(grade_module.ROOT)} >= ids
    grade(sub, limits=Limits(wall_s=60.0, cpu_s=60), only_tasks=ids, jobs=2, notebooks_out=tmp_path / "kept")
    from autograder.tests.test_notebooks import printed  # what a kept notebook's code cells printed

    return printed(tmp_path / "kept" / "ex01_ledger_70b.ipynb"), printed(tmp_path / "kept" / "ex06_tail_fanout.ipynb")


def test_kernels_in_lanes_at_once_cannot_reach_each_other(tmp_path, monkeypatch):
    """Two notebooks of one student in two lanes at once (lanes only where every kernel has a
    mount namespace): one kernel's attempt to leave a file in the other's folders finds no
    other kernel's folder at all. Without mount namespaces (uid-only) the two run one after the
    other, and the later one's folders are closed while the earlier one runs."""
    from autograder.sandbox import os_boundary

    runs = _course_folders_of_each_run(monkeypatch)
    planter, watcher = _two_lanes_one_plants(tmp_path, window=8)  # both start within a second or two
    # the three notebooks that run code, a lane each (two jobs: one lane more than the jobs)
    assert [len(run) for run in runs] == [3 if os_boundary.boundary().bwrap else 1]
    assert "NOT PLANTED" in planter and "NO PLANT" in watcher, (planter[-300:], watcher[-300:])


def test_control_kernels_in_lanes_that_may_write_each_others_folders_meet(tmp_path, monkeypatch):
    """The control: with no boundary (trusted code), two lanes forced, and each kernel allowed
    to write the folder that holds every kernel's folders (its audit hook's list), the same
    notebooks do meet, so the test above would see it."""
    from autograder.notebooks import autograding, kernel_spec
    from autograder.sandbox import os_boundary

    monkeypatch.setenv(os_boundary.MODE_VARIABLE, "none")
    monkeypatch.setattr(autograding, "kernel_lanes", lambda wanted, boundary, running: 2)
    monkeypatch.setattr(kernel_spec.KernelFolders, "writable",
                        property(lambda f: [f.home, f.cwd, f.tmp, f.sockets, f.base.parent]))
    runs = _course_folders_of_each_run(monkeypatch)
    planter, watcher = _two_lanes_one_plants(tmp_path, window=40)  # ends once found: room for a busy machine
    assert [len(run) for run in runs] == [2]
    assert "PLANTED" in planter.replace("NOT PLANTED", "") and "FOUND A PLANT" in watcher, (planter[-300:], watcher[-300:])
