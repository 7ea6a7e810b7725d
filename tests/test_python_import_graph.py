"""Arrows one way: no import cycle among the modules of ``servelab`` and
``autograder``, and no module importing another's private (``_``) name.

The walk is static (``ast``), so it sees every import statement wherever it stands: a cycle
hidden behind an import inside a function, or behind ``if TYPE_CHECKING:``, is still a cycle of
the design. Compiled modules (``servelab._core``) and third-party packages are not nodes.
"""

from __future__ import annotations

import ast
from pathlib import Path

from module_cycles import cycles

ROOT = Path(__file__).resolve().parents[1]

PACKAGES = {"servelab": ROOT / "python" / "servelab", "autograder": ROOT / "autograder"}
SKIP = ("autograder/tests/", "autograder/exercises/")  # test code and data, not the design


def modules(packages: dict[str, Path]) -> dict[str, Path]:
    """Dotted module name -> its file, for every ``.py`` of ``packages`` (name -> folder)."""
    out = {}
    for name, folder in packages.items():
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder.parent).as_posix()
            if rel.startswith(SKIP):
                continue
            dotted = rel.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
            out[dotted] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[tuple[str, str]]:
    """``(module, imported name)`` pairs of the known modules ``path`` imports, relative imports
    resolved; ``imported name`` is ``""`` for ``import a.b`` and ``from a import b`` when ``b``
    is itself a module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {(alias.name, "") for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    found.add((f"{base}.{alias.name}", ""))
                elif base in known:
                    found.add((base, alias.name))
    return found


def graph(known: dict[str, Path]) -> dict[str, set[str]]:
    return {name: {target for target, _ in imports(name, path, known) if target != name}
            for name, path in known.items()}


def test_servelab_and_autograder_have_no_import_cycle():
    known = modules(PACKAGES)
    assert len(known) > 60 and "autograder.sandbox.child" in known and "servelab.serving_core" in known
    assert cycles(graph(known)) == []


def private_imports(known: dict[str, Path]) -> list[str]:
    """Imports of a private name (``_x``) of another module, and of a private module
    (``servelab._checks``) from outside its own package. ``from servelab import _core`` (the
    compiled core, a module the walk cannot see) is servelab's own business."""
    out = []
    for name, path in known.items():
        for target, imported in imports(name, path, known):
            top = name.split(".")[0]
            full = f"{target}.{imported}" if imported else target
            if imported.startswith("_") and not imported.startswith("__") and full != "servelab._core":
                out.append(f"{name} imports {full}")
            elif any(part.startswith("_") and not part.startswith("__") for part in target.split(".")) \
                    and target.split(".")[0] != top:
                out.append(f"{name} imports {full}")
    return sorted(out)


def test_no_module_imports_another_modules_private_name():
    assert private_imports(modules(PACKAGES)) == []


def test_the_walk_finds_a_planted_cycle(tmp_path):
    """The walk above is worth something only if it would see a cycle: a package whose modules
    import each other through a relative import, a function-level import and a TYPE_CHECKING
    block (each a way a real cycle hides) is caught; cut one arrow and it is not."""
    pkg = tmp_path / "planted"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from planted import c\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from planted.a import x\n")
    known = modules({"planted": pkg})
    assert cycles(graph(known)) == [["planted.a", "planted.c", "planted.sub.b"]]
    (pkg / "c.py").write_text("import json\n")
    assert cycles(graph(modules({"planted": pkg}))) == []
    (pkg / "a.py").write_text("from planted.sub.b import _helper\n")
    assert private_imports(modules({"planted": pkg})) == ["planted.a imports planted.sub.b._helper"]
