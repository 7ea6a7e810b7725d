"""The students' pytest harness (``pytest assignments/``), whose manifest and Hypothesis
profiles the autograder (``autograder/grading/``, the grader itself) reads too.

``manifest`` reads ``assignments/manifest.toml``, the one place that says task -> tests ->
points -> visibility -> lecture section; ``plugin`` is the pytest plugin that turns a test run
into a per-task points table; ``fail_fast`` reports a task not started in one line;
``time_limit`` ends a stuck test; ``submission_rules`` says what a submission may import (the
grader reads it too) and ``submission_guard`` applies it to the students' files; ``hypothesis_profiles`` holds the shared profiles.
"""
