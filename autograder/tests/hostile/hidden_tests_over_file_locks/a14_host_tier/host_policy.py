"""Empty: a second task, so that the tasks run in worker processes as `grade`'s command line runs
them (with one task the grader runs it first); before, the notebooks' kernels ran beside them."""
