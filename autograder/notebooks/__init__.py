"""The nbgrader notebooks (``assignments/notebooks/``).

* :mod:`.nbgrader`: the door the rest of the grader uses, one name for each of these jobs:
  :mod:`.cells` (the manifest's notebooks and their cells' points), :mod:`.launch` (one
  nbgrader run), :mod:`.generation` (``generate_assignment``: the student versions),
  :mod:`.submitted` (a submitted notebook before grading), :mod:`.autograding`
  (``autograde``) and :mod:`.scores` (the cells' lines in results.json);
* :mod:`.runner`: the process that runs nbgrader (started by :mod:`.launch`);
* :mod:`.kernel_spec`: each notebook kernel's fresh folders and the spec that starts it;
* :mod:`.recheck`: the grader's own, second check of every autograded cell, on values the
  sandboxed child hands back (nbgrader's test cells share the student's kernel);
* :mod:`.safe_files`: copies made as root without following a link (``O_NOFOLLOW`` walks);
* :mod:`.kept`: the notebooks kept for manual grading, without the course's private lines;
* :mod:`.instructors_log`: where nbgrader's and the kernel's text goes instead of results.json.

The notebook's code runs in :mod:`autograder.sandbox.kernel` (a kernel) and
:mod:`autograder.sandbox.child` (the recheck), behind the same OS boundary as Python tasks.
"""
