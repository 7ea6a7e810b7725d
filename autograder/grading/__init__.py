"""Grading submissions: one (:mod:`.grade`), many (:mod:`.gradebook`), and what students see
(:mod:`.feedback`).

:mod:`.submission` takes the edit files from a folder or zip; :mod:`.judge` runs a task's
pristine tests in the grader's process (:mod:`.testload` imports and calls them), with the
student's modules answering from the sandbox (:mod:`autograder.sandbox`); :mod:`.grading_secret`
seeds the generated inputs; :mod:`.calibrate` scales the time limits to the machine;
:mod:`.results` writes Gradescope's results.json.
"""
