"""``python -m autograder {release,grade,grade-all,feedback,regenerate,selfcheck}`` (see README.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autograder.sandbox.remote import Limits


def _limits(args) -> Limits:
    return Limits(wall_s=args.timeout, cpu_s=max(1, int(args.timeout)), memory_bytes=args.memory_mb << 20,
                  output_bytes=args.output_kb << 10)


class HELP(argparse.ArgumentDefaultsHelpFormatter):
    """Every help shows each option's default: "(default: ...)" is added, except for a default
    of None, whose help says in words what happens (as "(default: print it)")."""

    def _get_help_string(self, action: argparse.Action) -> str:
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
        if name == "grade-all":
            p.add_argument("--jobs", type=int, default=None, help="worker processes (default: the CPU count)")

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
        import os

        from autograder.sandbox import os_boundary
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
        files = release(ROOT, args.out, force=args.force)
        print(f"wrote {len(files)} files to {args.out}")
        return 0
    if args.command == "grade":
        import json

        from autograder.grading import grading_secret
        from autograder.grading.grade import ROOT, grade
        data = grade(args.submission, root=args.root or ROOT, out=args.out, limits=_limits(args),
                     report=lambda line: print(line, file=sys.stderr),
                     secret=grading_secret.resolve(args.secret_file))
        print(data["output"])
        print(f"total: {data['score']} / {data['max_score']}" + (f"  (written to {args.out})" if args.out else ""))
        if args.out is None:
            json.dump(data, sys.stdout, indent=2, sort_keys=True)
            print()
        return 0
    if args.command == "grade-all":
        from autograder.grading.grade import ROOT
        from autograder.grading.gradebook import grade_all
        if args.secret_file is not None:  # the worker processes read it from the environment
            import os
            os.environ["SERVELAB_GRADING_SECRET_FILE"] = str(args.secret_file.resolve())
        grade_all(args.dir, args.out, root=args.root or ROOT, limits=_limits(args), jobs=args.jobs)
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
