"""``selfcheck``: the grader proves itself on submissions whose grade is known.

* the reference solutions score full marks;
* the release grades without error and scores zero, and in the release ``pytest assignments/``
  shows 0 points with every task failing cleanly; pasting one task's reference back earns
  exactly that task's points (this runs the release's tests with this checkout's installed
  servelab: no second Rust build);
* every mutant (``autograder/mutants/*.toml``) loses points on its own task and only there;
* every hostile submission (``autograder/tests/hostile/<name>/``, its ``expect.toml`` giving
  ``max_points``) scores at most that, under tight limits, and leaves the course copy intact;
* every task's tests bound what they compute with: graded with every number the submission
  sends back made huge (:func:`~autograder.selfcheck.bounds.check_bounds`), the grader's own process stays within
  :data:`~autograder.selfcheck.bounds.BOUNDS_RSS_BYTES` and :data:`~autograder.selfcheck.catalogue.HOSTILE_SECONDS`, and the task loses points;
* notebooks: the source notebooks score their autograded points (inside "reference"), the
  released ones zero with every cell graded (inside "release"), and released notebooks whose
  test cells were edited or deleted still score zero (nbgrader restores them from the source).

* every graded test of the manifest is failed by at least one mutant (a test that no mutant
  fails could be passed by a lookup table without anyone noticing): the list of the others is
  the list of the others fails the self-check (:data:`~autograder.selfcheck.catalogue.SURVIVORS_FAIL`).

Each check grades one submission (or runs the release's pytest once) and returns a
:class:`~autograder.selfcheck.runner.Result`: its problems (empty: it holds), how long it took, and what the mutant checks
need. :func:`~autograder.selfcheck.runner.run_all` runs them in parallel, one check per worker process (``--jobs``); each
grading scales its time limits to the machine's load (:mod:`autograder.grading.calibrate`), so a busy
machine makes the self-check slower, never wrong. ``python -m autograder selfcheck`` prints
them as a table; ``autograder/tests/test_selfcheck.py`` runs them all once per pytest session
and asserts on each.

The package: :mod:`.catalogue` (which checks exist, the known submissions, their limits),
:mod:`.submissions`, :mod:`.bounds` and :mod:`.tampering` (the checks), :mod:`.runner` (workers,
the table). The names below are the ones the grader's tests and ``python -m autograder`` use.
"""

from autograder.selfcheck.bounds import BOUNDS_AS_BYTES, BOUNDS_RSS_BYTES, INFLATE_BY, check_bounds, inflate
from autograder.selfcheck.catalogue import (HOSTILE, HOSTILE_LIMITS, HOSTILE_SECONDS, MUTANTS, RELEASE_PYTEST_S,
                                            SELFCHECK_SECRET, SURVIVORS_FAIL, Check, Factor, checks,
                                            course_fingerprint, full_marks, hostiles, mutants,
                                            notebook_full_marks, points_by_task, reference_submission,
                                            surviving_tests)
from autograder.selfcheck.runner import Result, boundary_line, default_jobs, main, run_all, run_one, survivors_of
from autograder.selfcheck.submissions import (check_hostile, check_mutant, check_paste_back, check_reference,
                                              check_release_grades_zero, check_release_pytest_zero, make_release,
                                              run_release_pytest)
from autograder.selfcheck.tampering import check_notebook_tampering, tamper

__all__ = ["BOUNDS_AS_BYTES", "BOUNDS_RSS_BYTES", "HOSTILE", "HOSTILE_LIMITS", "HOSTILE_SECONDS", "INFLATE_BY",
           "MUTANTS", "RELEASE_PYTEST_S", "SELFCHECK_SECRET", "SURVIVORS_FAIL", "Check", "Factor", "Result",
           "boundary_line", "check_bounds", "check_hostile", "check_mutant", "check_notebook_tampering",
           "check_paste_back", "check_reference", "check_release_grades_zero", "check_release_pytest_zero",
           "checks", "course_fingerprint", "default_jobs", "full_marks", "hostiles", "inflate", "main",
           "make_release", "mutants", "notebook_full_marks", "points_by_task", "reference_submission",
           "run_all", "run_one", "run_release_pytest", "survivors_of", "surviving_tests", "tamper"]
