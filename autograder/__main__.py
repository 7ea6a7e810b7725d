"""``python -m autograder {release,grade,grade-all,feedback,regenerate,selfcheck}`` (see README.md)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from autograder.sandbox.remote import Limits


def _limits(args) -> Limits:
    return Limits(wall_s=args.timeout, cpu_s=max(1, int(args.timeout)), memory_bytes=args.memory_mb << 20,
                  output_bytes=args.output_kb << 10)


def _cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class HELP(argparse.ArgumentDefaultsHelpFormatter):
    """Every help shows each option's default: "(default: ...)" is added, except for a default
    of None, whose help says in words what happens (as "(default: print it)")."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        return action.help if action.default is None else super()._get_help_string(action)


TIMEOUT_HELP = ("per test: the seconds of wall-clock time, and of CPU time, that the student's process may use "
                "(a notebook: per cell wall-clock, 4x the CPU time for the whole kernel); each grading first "
                "scales both up, never down, to this machine's speed and load (autograder/grading/calibrate.py)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m autograder", formatter_class=HELP)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("release", help="write the student repository into OUT", formatter_class=HELP)
    p.add_argument("out", type=Path, help="the new release folder")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists")
    p.add_argument("--readable", action="store_true",
                   help="ship the readable library (sources, references, tests), for a course without grades; "
                        "the default ships it compiled (a staff binary)")
    p.add_argument("--wheels", type=Path, default=Path("dist/staff"),
                   help="the staff wheels' folder (make staff-wheels), copied into the release's wheels/")

    for name, what in (("grade", "grade one submission (a folder or a zip)"),
                       ("grade-all", "grade every submission in DIR (folders or zips)")):
        p = sub.add_parser(name, help=what, formatter_class=HELP)
        if name == "grade":
            p.add_argument("submission", type=Path, help="a folder or a .zip")
            p.add_argument("--out", type=Path, default=None,
                           help="where to write results.json (default: print it)")
        else:
            p.add_argument("dir", type=Path, help="a folder of submissions, each a folder or a .zip named after the student")
            p.add_argument("--out", type=Path, default=Path("out/gradebook"),
                           help="the output folder (results/, notebooks/, gradebook.csv, timing.csv, similarity.csv)")
        p.add_argument("--root", type=Path, default=None, help="the pristine course copy (default: this checkout)")
        p.add_argument("--timeout", type=float, default=60.0, help=TIMEOUT_HELP)
        p.add_argument("--memory-mb", type=int, default=2048, help="address space of the student's process, MiB")
        p.add_argument("--output-kb", type=int, default=1024, help="output the student's process may write, KiB")
        if name == "grade":
            p.add_argument("--trust-submission", action="store_true",
                           help="grade without an OS boundary (no root, no bubblewrap): only your own code")
        p.add_argument("--secret-file", type=Path, default=None,
                       help="the instructors' grading secret (default: $SERVELAB_GRADING_SECRET_FILE, "
                            "$SERVELAB_GRADING_SECRET, else a random one recorded beside the results)")
        p.add_argument("--jobs", type=int, default=None,
                       help="worker processes (default: the CPU count): grade-all's submissions at a time; "
                            "grade's tasks at a time, with the notebooks beside them")
        if name == "grade-all":
            p.add_argument("--after-due-date", action="store_true",
                           help="the due date has passed: each results.json's score counts the hidden tests too "
                                "(before it, only the visible ones; the gradebook always counts every test)")
        else:
            p.add_argument("--submission-metadata", type=Path, default=None,
                           help="Gradescope's submission_metadata.json: the student's ids seed the generated "
                                "inputs, and past its due date the score counts the hidden tests (default: "
                                "seeded by the submission's name, hidden tests not counted)")

    p = sub.add_parser("regenerate", help="rewrite the answer key (autograder/answers/)", formatter_class=HELP)
    p.add_argument("--check", action="store_true", help="only say whether the committed key is stale")

    p = sub.add_parser("selfcheck", help="reference, release, mutants and hostile submissions", formatter_class=HELP)
    p.add_argument("--jobs", type=int, default=None, help="checks graded side by side (default: the CPU count)")

    p = sub.add_parser("feedback", help="one Markdown page per student from grade-all's or grade's output",
                       formatter_class=HELP)
    p.add_argument("gradebook", type=Path,
                   help="grade-all's --out folder, a folder holding grade's results.json, or a results.json")
    p.add_argument("--out", type=Path, default=Path("out/feedback"), help="the folder of Markdown pages")
    p.add_argument("--after-due-date", action="store_true", help="also show after_due_date tests")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in ("grade", "grade-all"):
        from autograder.sandbox import os_boundary
        if args.jobs is not None and args.jobs < 1:
            parser.exit(2, f"python -m autograder {args.command}: error: --jobs must be at least 1, got {args.jobs}\n")
        if getattr(args, "trust_submission", False):
            os.environ[os_boundary.TRUST_VARIABLE] = "1"
        try:
            os_boundary.require()
        except os_boundary.Refused as exc:
            print(f"autograder: {exc}", file=sys.stderr)
            return 2
    if args.command == "release":
        from autograder.grading.grade import ROOT
        from autograder.release.repository import release
        wheels = [] if args.readable else sorted(args.wheels.glob("servelab-*.whl"))
        if not args.readable and not wheels:
            print(f"autograder: a staff release needs its wheels, and {str(args.wheels)!r} holds none: "
                  "run `make staff-wheels` (or give --wheels DIR, or --readable)", file=sys.stderr)
            return 2
        files = release(ROOT, args.out, force=args.force, readable=args.readable, wheels=wheels)
        print(f"wrote {len(files)} files to {args.out}")
        from autograder.release import similarity  # which readable files hold a task's solution
        found = similarity.check_release(ROOT, args.out)
        print(f"similarity check: {len(found)} (task, file) pair(s) at or above {similarity.LIMIT:.0%} of a task's "
              f"solution{' (a readable release holds answers, as meant)' if args.readable else ''}")
        for finding in found:
            print(f"  {finding}")
        return 0
    if args.command == "grade":
        import json

        from autograder.grading import grading_secret, results, submission_metadata
        from autograder.grading.grade import ROOT, grade
        meta = submission_metadata.read(args.submission_metadata) if args.submission_metadata else None
        data = grade(args.submission, root=args.root or ROOT, out=args.out, limits=_limits(args),
                     report=lambda line: print(line, file=sys.stderr),
                     secret=grading_secret.resolve(args.secret_file), metadata=meta,
                     jobs=_cores() if args.jobs is None else args.jobs)
        print(data["output"])
        later = results.total_points(data) != data["score"] or not data.get("extra_data", {}).get("hidden_points_counted")
        print(f"total: {data['score']} / {data['max_score']}" + (f"  (written to {args.out})" if args.out else "")
              + ("" if not later else f"  (visible tests; every test: {results.total_points(data)})"))
        if args.out is None:
            json.dump(data, sys.stdout, indent=2, sort_keys=True)
            print()
        return 0
    if args.command == "grade-all":
        from autograder.grading.grade import ROOT
        from autograder.grading.gradebook import grade_all
        if args.secret_file is not None:  # the worker processes read it from the environment
            os.environ["SERVELAB_GRADING_SECRET_FILE"] = str(args.secret_file.resolve())
        grade_all(args.dir, args.out, root=args.root or ROOT, limits=_limits(args), jobs=args.jobs,
                  past_due=args.after_due_date)
        return 0
    if args.command == "regenerate":
        from autograder.release.answer_key import regenerate
        return regenerate(check=args.check)
    if args.command == "feedback":
        from autograder.grading.feedback import publish
        try:
            publish(args.gradebook, args.out, after_due_date=args.after_due_date)
        except (FileNotFoundError, ValueError) as exc:
            parser.exit(2, f"python -m autograder feedback: error: {exc}\n")
        return 0
    if args.command == "selfcheck":
        from autograder.selfcheck import main as selfcheck
        if args.jobs is not None and args.jobs < 1:
            parser.exit(2, f"python -m autograder selfcheck: error: --jobs must be at least 1, got {args.jobs}\n")
        return selfcheck(jobs=args.jobs)
    return 2


if __name__ == "__main__":
    sys.exit(main())
