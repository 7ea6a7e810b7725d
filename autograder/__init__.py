"""servelab's autograder: ``python -m autograder {release,grade,grade-all,feedback,regenerate,selfcheck}``.

Instructors' guide, code map and threat model: ``autograder/README.md``. The pass/fail decision
is made in the grader's process (:mod:`autograder.grading.judge`) from plain values that student
code, running in a sandboxed child process (:mod:`autograder.sandbox.child`), returns for inputs
the grader chose.
"""
