"""Arrows one way: the lecture's settings live in ``servelab.lecture``, and no
library module reaches into a demo for them; only the CLI (which runs the demos) and the demos
themselves import ``servelab.demos``."""

from __future__ import annotations

import ast
from pathlib import Path

import servelab

PACKAGE = Path(servelab.__file__).parent
ALLOWED = {"cli.py"}  # `servelab demo 03` runs a demo: the one arrow into demos/


def demo_imports(path: Path) -> list[str]:
    """The ``servelab.demos`` imports of one module, as written."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found += [n for n in names if n == "servelab.demos" or n.startswith("servelab.demos.")]
    return found


def test_no_library_module_imports_a_demo():
    modules = [p for p in PACKAGE.rglob("*.py") if "demos" not in p.relative_to(PACKAGE).parts
               and p.relative_to(PACKAGE).as_posix() not in ALLOWED]
    assert len(modules) > 20  # the walk found the package
    offenders = {p.relative_to(PACKAGE).as_posix(): demo_imports(p) for p in modules}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_check_sees_a_demo_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from servelab.demos import demo03\nimport servelab.demos.demo04 as d\n")
    assert demo_imports(bad) == ["servelab.demos.demo03", "servelab.demos.demo04"]
