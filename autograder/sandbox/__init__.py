"""Where student code runs, and the only way the grader talks to it.

* :mod:`.os_boundary`: the operating system's boundary around every process that runs a
  submission (another uid, bubblewrap's namespaces);
* :mod:`.child`: that process for Python tasks (standard library only; limits, audit hook, then
  a request/reply loop); :mod:`.kernel`: the same sandbox around a notebook's Jupyter kernel;
* :mod:`.remote`: the grader's side of the child (start it, call into it, proxies for the
  student's modules); :mod:`.wire`: the plain-data format of the replies.

Nothing here knows about tasks, tests or points (:mod:`autograder.grading` does).
"""
