"""Grading support shared by students (the local points table) and the autograder.

``manifest`` reads ``assignments/manifest.toml``, the one place that says task -> tests ->
points -> visibility -> lecture section; ``plugin`` is the pytest plugin that turns a test run
into a per-task points table.
"""
