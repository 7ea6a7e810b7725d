"""One task's verdict from the grader's ``results.json``, for GitHub Classroom's command grader.

``python3 task_passed.py results.json TASK`` prints the task's visible tests with their points and
exits 0 when every test of TASK earned its points (Classroom then awards the task's points), 1
otherwise, and 2 when the results are missing or name no such task (a grader that failed).
``python3 task_passed.py results.json --summary`` prints a Markdown table of every visible test.
Standard library only: it runs on the runner's own ``python3``, outside servelab's venv.
"""

from __future__ import annotations

import json
import sys


def load(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def graded_tests(results: dict, task: str) -> list[dict]:
    """The tests of ``task`` that the grader scores now: a notebook's manually graded cells wait
    for the instructor, so they neither pass nor fail the task here."""
    return [t for t in results["tests"] if t.get("extra_data", {}).get("task") == task
            and t.get("extra_data", {}).get("kind", "auto") == "auto"]


def verdict(results: dict, task: str) -> tuple[bool, list[str]]:
    """(every test of ``task`` earned its points, one line per visible test)."""
    tests = graded_tests(results, task)
    if not tests:
        raise KeyError(f"results.json has no graded test of the task {task!r}")
    lines = [f"{t['name']}: {t['score']} / {t['max_score']} {t.get('status', 'pending')}" for t in tests
             if t.get("visibility") == "visible"]
    return all(t["score"] >= t["max_score"] for t in tests), lines


def summary(results: dict) -> str:
    lines = [f"## servelab: {results['score']} / {results['max_score']} points", "",
             "| test | points | status |", "|---|---|---|"]
    lines += [f"| {t['name']} | {t['score']} / {t['max_score']} | {t.get('status', 'pending')} |" for t in results["tests"]
              if t.get("visibility") == "visible"]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: task_passed.py RESULTS_JSON (TASK | --summary)", file=sys.stderr)
        return 2
    try:
        results = load(argv[0])
        if argv[1] == "--summary":
            print(summary(results))
            return 0
        passed, lines = verdict(results, argv[1])
    except (OSError, ValueError, KeyError) as e:
        print(f"no verdict for {argv[1]!r} from {argv[0]!r}: {e}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
