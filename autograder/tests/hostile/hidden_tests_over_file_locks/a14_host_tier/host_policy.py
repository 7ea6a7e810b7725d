"""Empty: a second task, so that the tasks run in worker processes beside the notebooks
(with one task the grader runs it first, and the kernel would start after the receiver ended)."""
