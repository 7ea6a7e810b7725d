"""``python -m autograder {release,grade,grade-all,feedback,regenerate,selfcheck}`` (see README.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autograder.remote import Limits


def _limits(args) -> Limits:
    return Limits(wall_s=args.timeout, cpu_s=max(1, int(args.timeout)), memory_bytes=args.memory_mb << 20,
                  output_bytes=args.output_kb << 10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("release", help="write the student repository into OUT")
    p.add_argument("out", type=Path)
    p.add_argument("--force", action="store_true", help="replace OUT if it exists")

    for name, what in (("grade", "grade one submission (a folder or a zip)"),
                       ("grade-all", "grade every submission in DIR (folders or zips)")):
        p = sub.add_parser(name, help=what)
        p.add_argument("submission" if name == "grade" else "dir", type=Path)
        p.add_argument("--out", type=Path, default=None if name == "grade" else Path("out/gradebook"),
                       help="results.json (grade) or the output folder (grade-all)")
        p.add_argument("--root", type=Path, default=None, help="the pristine course copy (default: this one)")
        p.add_argument("--timeout", type=float, default=60.0, help="wall-clock seconds per task (and CPU seconds)")
        p.add_argument("--memory-mb", type=int, default=2048, help="address space of the child process")
        p.add_argument("--output-kb", type=int, default=1024, help="output the child process may write")
        p.add_argument("--secret-file", type=Path, default=None,
                       help="the instructors' grading secret (default: $SERVELAB_GRADING_SECRET_FILE, "
                            "$SERVELAB_GRADING_SECRET, else a random one recorded beside the results)")
        if name == "grade-all":
            p.add_argument("--jobs", type=int, default=None, help="worker processes (default: CPU count)")

    p = sub.add_parser("regenerate", help="rewrite the answer key (autograder/answers/)")
    p.add_argument("--check", action="store_true", help="only say whether the committed key is stale")

    sub.add_parser("selfcheck", help="reference, release, mutants and hostile submissions")

    p = sub.add_parser("feedback", help="one Markdown page per student from grade-all's output")
    p.add_argument("gradebook", type=Path, help="grade-all's --out folder")
    p.add_argument("--out", type=Path, default=Path("out/feedback"))
    p.add_argument("--after-due-date", action="store_true", help="also show after_due_date tests")

    args = parser.parse_args(argv)
    if args.command == "release":
        from autograder.grade import ROOT
        from autograder.release import release
        files = release(ROOT, args.out, force=args.force)
        print(f"wrote {len(files)} files to {args.out}")
        return 0
    if args.command == "grade":
        import json

        from autograder import grading_secret
        from autograder.grade import ROOT, grade
        data = grade(args.submission, root=args.root or ROOT, out=args.out, limits=_limits(args),
                     secret=grading_secret.resolve(args.secret_file))
        print(data["output"])
        print(f"total: {data['score']} / {data['max_score']}" + (f"  (written to {args.out})" if args.out else ""))
        if args.out is None:
            json.dump(data, sys.stdout, indent=2, sort_keys=True)
            print()
        return 0
    if args.command == "grade-all":
        from autograder.grade import ROOT
        from autograder.gradebook import grade_all
        if args.secret_file is not None:  # the worker processes read it from the environment
            import os
            os.environ["SERVELAB_GRADING_SECRET_FILE"] = str(args.secret_file.resolve())
        grade_all(args.dir, args.out, root=args.root or ROOT, limits=_limits(args), jobs=args.jobs)
        return 0
    if args.command == "regenerate":
        from autograder.answers import regenerate
        return regenerate(check=args.check)
    if args.command == "feedback":
        from autograder.feedback import publish
        publish(args.gradebook, args.out, after_due_date=args.after_due_date)
        return 0
    if args.command == "selfcheck":
        from autograder.selfcheck import main as selfcheck
        return selfcheck()
    return 2


if __name__ == "__main__":
    sys.exit(main())
