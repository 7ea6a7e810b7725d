"""The engine loop knows no feature (ARCHITECTURE.md, "Rules for changing it"): a feature plugs in
as a scheduler, a plan's verify step or a step hook, so ``engine/core.py`` imports no speculation
or host-tier module. It reads the repository's source file, so it is not in the staff wheel's
subset of tests (autograder/tests/test_staff_wheel.py), where the module is compiled."""

import ast
from pathlib import Path

from servelab.engine.core import Plan


def test_the_engine_loop_imports_no_feature():
    # the source file of the repository, not core.__file__ (a compiled module in a staff wheel)
    source = Path(__file__).resolve().parents[1] / "python" / "servelab" / "engine" / "core.py"
    tree = ast.parse(source.read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} \
        | {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if "speculative" in m or "offload" in m}, imported
    assert [f for f in Plan.__dataclass_fields__] == ["batch", "preempted", "admitted", "copies"]
