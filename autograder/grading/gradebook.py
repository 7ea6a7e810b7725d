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
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from autograder.files import write_text_atomic
from autograder.grading.grade import grade, manifest_of
from autograder.grading import grading_secret
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


def _one(sub: Path, out: Path, root: Path, limits: Limits, everyone: Path,
         nb_course: Path | None) -> tuple[str, dict, str]:
    name = sub.stem if sub.suffix == ".zip" else sub.name
    if nb_course is not None:  # nbgrader's generate step ran once, in the parent
        nbgrader.adopt(root, nb_course)
    # other students' submissions are out of this one's reach
    # the autograded notebooks stay in OUT/notebooks/<student>/ for manual grading
    said: list[str] = []
    start = time.monotonic()
    data = grade(sub, root=root, out=out / "results" / f"{name}.json", limits=limits, extra_forbidden=[everyone, out],
                 notebooks_out=out / "notebooks" / name, report=said.append)
    return name, {**data, "execution_time": round(time.monotonic() - start, 3)}, " ".join(said)


def grade_all(folder: Path, out: Path, root: Path, limits: Limits = Limits(), jobs: int | None = None) -> Path:
    """Grades every submission; returns the path of ``gradebook.csv``."""
    folder, out = Path(folder).resolve(), Path(out).resolve()
    subs = submissions(folder)
    if jobs is not None and jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    manifest = manifest_of(root)
    # one secret for every worker (a random one goes into the environment they inherit, and is
    # recorded here, where only instructors look; autograder/grading/grading_secret.py)
    grading_secret.record(grading_secret.resolve(), out / f"gradebook{grading_secret.SIDECAR_SUFFIX}")
    rows: dict[str, dict] = {}
    timing: dict[str, str] = {}
    # spawn, not fork: the progress bar runs a thread, and forking a threaded process is unsafe
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs or os.cpu_count() or 1, mp_context=context) as pool, Progress(
            TextColumn("grading"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as bar:
        job = bar.add_task("grading", total=len(subs))
        nb_course = nbgrader.generated(root) if notebooks_of(root) else None
        futures = {pool.submit(_one, s, out, root, limits, folder, nb_course): s for s in subs}
        for future in as_completed(futures):
            sub = futures[future]
            try:
                name, data, limits_line = future.result()
                rows[name] = data
                timing[name] = limits_line
            except Exception as exc:  # the grader's own failure: say so in the gradebook, go on
                rows[sub.stem if sub.suffix == ".zip" else sub.name] = {"error": f"{type(exc).__name__}: {exc}"}
                bar.console.print(f"[red]grader error on {sub.name}: {type(exc).__name__}: {exc}")
            bar.advance(job)
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
        writer.writerow([name, *by_task.values(), pending, rows[name]["score"], rows[name]["max_score"]])
    path = write_text_atomic(out / "gradebook.csv", text.getvalue())
    times = io.StringIO()
    writer = csv.writer(times, lineterminator="\n")
    writer.writerow(["submission", "execution_time_s", "time_limits"])
    for name in sorted(rows):
        writer.writerow([name, rows[name].get("execution_time", ""), timing.get(name, "")])
    write_text_atomic(out / "timing.csv", times.getvalue())
    try:  # instructors only, beside the gradebook: pairs of edit files alike (autograder/grading/similarity.py)
        from autograder.grading import similarity
        print(f"similar pairs: {similarity.write_report(subs, manifest, root, out)}")
    except ImportError as exc:  # the grades stand without it
        print(f"no similarity report: {exc} (pip install -e '.[notebooks]')")
    print(f"graded {len(rows)} submissions: {path} (time limits per submission: {out / 'timing.csv'})")
    return path
