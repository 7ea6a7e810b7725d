"""What runs on CI services for a release: the GitHub Classroom workflow (:mod:`.workflow`) and
its per-task verdict script (``task_passed.py``)."""
