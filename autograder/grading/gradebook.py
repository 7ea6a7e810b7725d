"""``grade-all DIR``: every submission in DIR (each a folder or a zip, named after the student),
graded on local cores; one results.json per submission and a CSV gradebook, both written
atomically, rows in name order (the same DIR gives the same gradebook). ``timing.csv`` beside
it says, per submission, how long its grading took and by how much its time limits were scaled
for the machine's load (:mod:`autograder.grading.calibrate`): that changes no grade, so it stays out of
the gradebook and the results."""

from __future__ import annotations

import csv
import io
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures import TimeoutError as FuturesTimeout
from datetime import datetime, timezone
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from autograder.files import write_text_atomic
from autograder.grading.grade import grade, manifest_of, submission_budget
from autograder.grading import calibrate, grading_secret, results, submission_metadata
from autograder.notebooks import nbgrader
from autograder.notebooks.nbgrader import cell_points, notebooks_of
from autograder.sandbox.remote import Limits


def submissions(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise NotADirectoryError(f"grade-all DIR must be a folder of submissions, got {str(folder)!r}")
    found = sorted(p for p in folder.iterdir() if not p.name.startswith(".") and (p.is_dir() or p.suffix == ".zip"))
    if not found:
        raise ValueError(f"grade-all DIR holds no submission (folders or .zip files): {str(folder)!r}")
    return found


def student_of(sub: Path) -> str:
    """The student a submission is named after (``alice.zip`` and ``alice/`` alike)."""
    return sub.stem if sub.suffix == ".zip" else sub.name


def _one(sub: Path, out: Path, root: Path, limits: Limits, everyone: Path,
         nb_course: Path | None, past_due: bool) -> tuple[str, dict, str]:
    name = student_of(sub)
    if nb_course is not None:  # nbgrader's generate step ran once, in the parent
        nbgrader.adopt(root, nb_course)
    # other students' submissions are out of this one's reach
    # the autograded notebooks stay in OUT/notebooks/<student>/ for manual grading
    said: list[str] = []
    start = time.monotonic()
    # seeded by the student's name (submission_metadata.folder_identity); past the due date
    # (--after-due-date) results.json's score counts the hidden tests too
    due = datetime.min.replace(tzinfo=timezone.utc) if past_due else None
    data = grade(sub, root=root, out=out / "results" / f"{name}.json", limits=limits, extra_forbidden=[everyone, out],
                 notebooks_out=out / "notebooks" / name, report=said.append,
                 metadata=submission_metadata.Metadata(due=due))
    return name, {**data, "execution_time": round(time.monotonic() - start, 3)}, " ".join(said)


# what a grading may take beyond its tasks' budgets: the calibration, nbgrader's notebooks (their
# own per-cell limits), starting and ending the worker; past it the student's row says so
GRACE_S = 600.0


def grade_all(folder: Path, out: Path, root: Path, limits: Limits = Limits(), jobs: int | None = None,
              past_due: bool = False, wait_s: float | None = None) -> Path:
    """Grades every submission; returns the path of ``gradebook.csv``, which is always written
    (``timing.csv`` beside it names, per student, the tasks whose time budget ran out):
    a student whose grading failed, or outlived ``wait_s`` (default: the submission budget of
    :func:`autograder.grading.grade.submission_budget` at the largest calibration factor, plus
    :data:`GRACE_S`, for each round of ``jobs`` gradings), has a row saying so.
    ``past_due``: the due date has passed (results.json's score counts the hidden tests)."""
    folder, out = Path(folder).resolve(), Path(out).resolve()
    subs = submissions(folder)
    if jobs is not None and jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    manifest = manifest_of(root)
    workers = jobs or os.cpu_count() or 1  # every core unless told: a grading is one process
    started = time.monotonic()
    if wait_s is None:
        rounds = -(-len(subs) // workers)
        wait_s = rounds * (submission_budget(manifest, calibrate.scaled(limits, calibrate.MAX_FACTOR),
                                             calibrate.MAX_FACTOR, len(notebooks_of(root))) + GRACE_S)
    # one secret for every worker (a random one goes into the environment they inherit, and is
    # recorded here, where only instructors look; autograder/grading/grading_secret.py)
    grading_secret.record(grading_secret.resolve(), out / f"gradebook{grading_secret.SIDECAR_SUFFIX}")
    rows: dict[str, dict] = {}
    timing: dict[str, str] = {}
    # spawn, not fork: the progress bar runs a thread, and forking a threaded process is unsafe
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context)
    finished = False
    try:
        with Progress(TextColumn("grading"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as bar:
            job = bar.add_task("grading", total=len(subs))
            nb_course = nbgrader.generated(root) if notebooks_of(root) else None
            futures = {pool.submit(_one, s, out, root, limits, folder, nb_course, past_due): s for s in subs}
            try:
                for future in as_completed(futures, timeout=wait_s):
                    sub = futures[future]
                    try:
                        name, data, limits_line = future.result()
                        rows[name] = data
                        timing[name] = limits_line
                    except Exception as exc:  # the grader's own failure: say so in the gradebook, go on
                        rows[student_of(sub)] = {"error": f"{type(exc).__name__}: {exc}"}
                        bar.console.print(f"[red]grader error on {sub.name}: {type(exc).__name__}: {exc}")
                    bar.advance(job)
                finished = True
            except FuturesTimeout:
                bar.console.print(f"[red]grade-all: gradings still running after {wait_s:.0f} s were stopped")
    finally:
        for sub in subs:  # still running, or never started: the row says why
            rows.setdefault(student_of(sub), {"error": "not graded: its grading outlived the class's time budget"})
        if finished:
            pool.shutdown(wait=True)
        else:
            _stop(pool)
        path = _write_gradebook(root, manifest, out, rows, timing)
    try:  # instructors only, beside the gradebook: pairs of edit files alike (autograder/grading/similarity.py)
        from autograder.grading import similarity
        print(f"similar pairs: {similarity.write_report(subs, manifest, root, out)}")
    except ImportError as exc:  # the grades stand without it
        print(f"no similarity report: {exc} (pip install -e '.[notebooks]')")
    minutes = (time.monotonic() - started) / 60
    print(f"graded {len(rows)} submissions: {path} (time limits per submission: {out / 'timing.csv'})")
    print(f"throughput: {throughput(len(rows), minutes, workers)}")
    return path


def throughput(count: int, minutes: float, workers: int) -> str:
    """What a class's grading achieved, for the instructor planning the next one.

    >>> throughput(20, 4.0, 2)
    '20 submissions in 4.0 min: 5.0 a minute, 2 at a time'
    """
    rate = count / minutes if minutes > 0 else float("inf")
    return f"{count} submissions in {minutes:.1f} min: {rate:.1f} a minute, {workers} at a time"


def budget_spent(data: dict) -> list[str]:
    """The tasks of a results.json whose time budget ran out (a test cut off or not run).

    >>> budget_spent({"tests": [{"extra_data": {"task": "a1"}, "output": "time budget: the time ..."},
    ...                         {"extra_data": {"task": "a2"}, "output": "passed"}]})
    ['a1']
    """
    marks = ("time budget:", "not run: this task's time budget")
    return sorted({t["extra_data"]["task"] for t in data.get("tests", []) if str(t.get("output", "")).startswith(marks)})


def _stop(pool: ProcessPoolExecutor) -> None:
    """Ends the pool without waiting for a grading that hangs: its workers are killed."""
    workers = list(getattr(pool, "_processes", {}).values())  # no public way to reach them
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in workers:
        if proc.is_alive():
            proc.kill()
    for proc in workers:
        proc.join(timeout=10)


def _write_gradebook(root: Path, manifest, out: Path, rows: dict[str, dict], timing: dict[str, str]) -> Path:
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    # columns: tasks, then notebooks (autograded points; manual cells add nothing until the
    # instructor grades them: `manual_pending` says how many points wait for that)
    columns = [*(t.id for t in manifest.tasks), *(nb.id for nb in notebooks_of(root))]
    pending = sum(c.points for nb in notebooks_of(root)
                  for c in cell_points(Path(root) / "assignments" / nb.file) if c.kind == "manual")
    max_score = manifest.total_points + sum(c.points for nb in notebooks_of(root)
                                            for c in cell_points(Path(root) / "assignments" / nb.file))
    writer.writerow(["submission", *columns, "manual_pending", "score", "max_score"])
    for name in sorted(rows):
        if "error" in rows[name]:
            writer.writerow([name, *("" for _ in columns), pending, f"grader error: {rows[name]['error']}", max_score])
            continue
        by_task = {c: 0 for c in columns}
        for test in rows[name]["tests"]:
            by_task[test["extra_data"]["task"]] += test["score"]
        # the instructors' total: every test, hidden ones included (results.json's score may
        # count the visible ones only: results.count_visible)
        writer.writerow([name, *by_task.values(), pending, results.total_points(rows[name]), max_score])
    path = write_text_atomic(out / "gradebook.csv", text.getvalue())
    times = io.StringIO()
    writer = csv.writer(times, lineterminator="\n")
    writer.writerow(["submission", "execution_time_s", "time_limits", "time_budget_ran_out"])
    for name in sorted(rows):
        writer.writerow([name, rows[name].get("execution_time", ""), timing.get(name, ""),
                         " ".join(budget_spent(rows[name])) or ("grading stopped" if "error" in rows[name] else "")])
    write_text_atomic(out / "timing.csv", times.getvalue())
    return path
