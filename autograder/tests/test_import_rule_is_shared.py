"""The import rule that students' `pytest assignments/` mirrors (servelab.harness.submission_rules)
is the one the grader applies: the judge hands the child that very list, the child's own copy of
the process modules is the rule's, and the child refuses in the rule's words, so that a refusal
reads the same in `make check` and in the grade."""

from __future__ import annotations

import inspect

from autograder.grading import judge
from autograder.sandbox import child
from servelab.harness import submission_rules


def test_the_judge_takes_the_refused_modules_from_the_rule():
    assert judge.BLOCKED_MODULES is submission_rules.REFUSED_MODULES


def test_the_childs_process_modules_are_the_rules():
    assert child.BLOCKED_TOP_MODULES == submission_rules.PROCESS_MODULES


def test_the_child_refuses_in_the_rules_words():
    # the hook stays for good in a process that installs it: its words are read from its source
    source = inspect.getsource(child.install_audit_hook)
    template = submission_rules.refused_message("{name}")
    assert f'f"{template}"' in source
