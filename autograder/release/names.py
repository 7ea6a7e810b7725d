"""A release checks its own words: every path, make target and task that its README, its
assignments' READMEs and its Makefile name must be in the release (a student who follows a
README to a file the release lacks, or types a ``make`` target it does not define, meets a dead
end in their first hour).

:func:`dead_names` reads the texts of a release (:func:`autograder.release.repository.plan`'s
files, or a folder on disk) and returns one line per name that points nowhere. What counts:

* **paths**: in Markdown, a code span that looks like a path (a ``/`` in it, or a file's
  extension), relative to the release or to the README's own folder; in the Makefile, a path in a
  comment. Folders made by the tools themselves (``.venv/``, ``out/``, ``dist/``) are no dead end;
* **make targets**: ``make X`` in a Markdown code span or block, and in the Makefile's comments:
  X must be a target the release's Makefile defines (a pattern rule's stem counts);
* **tasks**: a task id (``a7_paged_blocks``) anywhere must be one of the released manifest's;
  and the task table of ``assignments/README.md`` must list every released task.

>>> dead_names({"README.md": "Run `make check`, then read `assignments/a1_ledger/README.md`.",
...             "Makefile": "check:\\n\\tpytest\\n", "assignments/manifest.toml": ""})
['README.md: names assignments/a1_ledger/README.md, which the release lacks']
"""

from __future__ import annotations

import posixpath
import re
from pathlib import PurePosixPath

from servelab.harness.manifest import Manifest

# made by the tools (make build, make check, make wheel), never shipped
MADE_HERE = (".venv", "out/", "dist/", "target/", ".hypothesis", ".pytest_cache", "submission.zip", "wheels/*")
EXTENSIONS = (".py", ".md", ".toml", ".json", ".yml", ".yaml", ".ipynb", ".txt", ".cfg", ".whl", ".html", ".lock")
TASK_ID = re.compile(r"\ba\d{1,2}_[a-z][a-z_]*[a-z]\b")
CODE = re.compile(r"```[^\n]*\n(.*?)```|`([^`\n]+)`", re.S)
MAKE = re.compile(r"(?:^|[\s;&|(`])make\s+(?:-\S+\s+)*([a-z][\w-]*)", re.M)
TARGET = re.compile(r"^([A-Za-z][\w.%-]*)\s*:(?!=)", re.M)
PATH_IN_COMMENT = re.compile(r"(?<![\w./-])((?:[\w.-]+/)+[\w.-]*)")


def _docs(files: dict[str, str | None]) -> dict[str, str]:
    """The texts whose names are checked: the README, the assignments' READMEs, the Makefile."""
    return {rel: text for rel, text in files.items() if text is not None
            and (rel in ("README.md", "Makefile") or (rel.startswith("assignments/") and rel.endswith("README.md")))}


def _exists(name: str, where: str, files: set[str]) -> bool:
    """``name`` is a file or folder of the release: from its root, from the naming README's
    folder, or from ``assignments/`` (the task table's folders); a bare file name (a table's
    "file to edit" column, next to its folder) is found anywhere."""
    name = name.rstrip("/")
    if "/" not in name:
        return any(PurePosixPath(f).name == name or f"/{name}/" in f"/{f}" for f in files)
    for base in ("", str(PurePosixPath(where).parent), "assignments"):
        full = posixpath.normpath(posixpath.join(base, name))
        if full in files or any(f.startswith(full + "/") for f in files):
            return True
    return False


def _path_like(token: str) -> bool:
    """A token that names a file or a folder (``assignments/a1_ledger/``, ``ledger.py``), not a
    command, a placeholder (``path/to/...``) or arithmetic (``1/tp``)."""
    if any(c in token for c in " <>{}*$=:,()'\"@") or token.startswith(("/", "~", "-", "http")) or "path/to" in token:
        return False
    if token.endswith(EXTENSIONS) or token.startswith(".github/"):
        return True
    parts = [p for p in token.split("/") if p]
    return "/" in token and all(re.match(r"[A-Za-z_.][\w.-]*$", p) for p in parts) and not token.startswith(".")


def _code(text: str) -> list[str]:
    return [m.group(1) or m.group(2) for m in CODE.finditer(text)]


def makefile_targets(makefile: str) -> set[str]:
    return set(TARGET.findall(makefile)) - {"PHONY"}


def _target_defined(name: str, targets: set[str]) -> bool:
    return name in targets or any("%" in t and re.fullmatch(re.escape(t).replace("%", ".+"), name) for t in targets)


def named_targets(files: dict[str, str | None]) -> set[str]:
    """Every ``make`` target the release's docs name (``autograder/tests/test_release_names.py``
    also runs each as ``make -n``: a target that exists but needs one that does not is a dead
    end too)."""
    found = set()
    for rel, text in _docs(files).items():
        spans = ["\n".join(line for line in text.splitlines() if line.lstrip().startswith("#"))] if rel == "Makefile" \
            else _code(text)
        for span in spans:
            found |= set(MAKE.findall(span))
    return found


def dead_names(files: dict[str, str | None]) -> list[str]:
    """One line per name in the release's docs that points nowhere (empty: all resolve).
    ``files``: release-relative path -> text (None for a file whose text is not read)."""
    present = set(files)
    makefile = files.get("Makefile") or ""
    targets = makefile_targets(makefile)
    manifest_text = files.get("assignments/manifest.toml")
    tasks = {t.id for t in Manifest.from_toml(manifest_text).tasks} if manifest_text else set()
    dead = []
    for rel, text in sorted(_docs(files).items()):
        if rel == "Makefile":
            comments = "\n".join(line for line in text.splitlines() if line.lstrip().startswith("#"))
            paths = PATH_IN_COMMENT.findall(comments)
            spans = [comments]
        else:
            spans = _code(text)
            paths = [s.strip() for s in spans if _path_like(s.strip())]
        for path in paths:
            if path.startswith(MADE_HERE) or not _path_like(path):
                continue
            if not _exists(path, rel, present):
                dead.append(f"{rel}: names {path}, which the release lacks")
        for span in spans:
            for target in MAKE.findall(span):
                if not _target_defined(target, targets):
                    dead.append(f"{rel}: names `make {target}`, which the release's Makefile does not define")
        for task in sorted(set(TASK_ID.findall(text)) - tasks):
            if tasks:
                dead.append(f"{rel}: names the task {task}, which the release does not hold")
    table = files.get("assignments/README.md")
    if table is not None:
        rows = set(re.findall(r"^\| `(a\d+_\w+)/` \|", table, re.M))
        for task in sorted(tasks - rows):
            dead.append(f"assignments/README.md: its task table lacks {task}")
    return dead
