"""servelab's autograder: ``python -m autograder {release,grade,grade-all,regenerate,selfcheck}``.

Instructors' guide and threat model: ``autograder/README.md``. The pass/fail decision is made in
the grader's process (:mod:`autograder.judge`) from plain values that student code, running in
a sandboxed child process (:mod:`autograder.child`), returns for inputs the grader chose.
"""
