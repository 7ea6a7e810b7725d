"""How much of each task's solution a release lets a student read: a plagiarism-style check.

A renamed copy is still a copy, so the comparison is on token classes, as MOSS-like tools do:
every identifier becomes ``N``, every number ``0``, every string ``S`` (a docstring is one
token), keywords, builtins, ``self`` and operators stay, comments and layout go. A task's solution is the text of
its edit files' solution regions in the course copy (:data:`autograder.markers.SOLUTION`);
a run of :data:`RUN` consecutive tokens of it that appears anywhere in a file counts as found,
and a file *holds* the share of the solution's tokens that such runs cover. A release of the
staff binary must hold under :data:`LIMIT` of any task in every readable file
(``autograder/tests/test_release_similarity.py``); the readable release holds far more, as it is
meant to.

Readable: every file that decodes as UTF-8 (Python through :mod:`tokenize`, anything else, a
notebook's JSON or Markdown, through a plain word-and-symbol splitter), and the text members of
the wheels the release carries (what ``make build`` installs into ``.venv``: stubs, the package's
``__main__.py``, its metadata). Compiled modules are not text; :func:`source_runs_in_binary`
shows that they do not carry the source either.

>>> a = "def f(xs):\\n    total = 0\\n    for x in xs:\\n        total += x * x\\n    return total\\n"
>>> b = "def g(v):\\n    s = 0\\n    for e in v:\\n        s += e * e\\n    return s\\n"
>>> normal_tokens(a) == normal_tokens(b)   # renaming changes nothing
True
>>> round(share_held(normal_tokens(a), normal_tokens(b)), 2)
1.0
"""

from __future__ import annotations

import builtins
import io
import json
import keyword
import re
import textwrap
import tokenize
import zipfile
from dataclasses import dataclass
from pathlib import Path

from autograder.markers import SOLUTION, lines

RUN = 12  # tokens in a compared run (MOSS's usual size: short idioms do not match)
LIMIT = 0.10  # a file holding this share of a task's solution gives the task away
_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
         tokenize.ENCODING, tokenize.ENDMARKER}
_WORDS = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'|==|!=|<=|>=|\*\*|//|->|\S")


# names a copier does not rename, kept as they are: keywords, builtins (``len``, ``dict``, ``range``)
# and ``self``; classing them as ``N`` too would match every class's typed attribute declarations
KEPT_NAMES = frozenset(keyword.kwlist) | frozenset(dir(builtins)) | {"self"}


def _klass(kind: int, text: str) -> str:
    if kind == tokenize.NAME:
        return text if text in KEPT_NAMES else "N"
    if kind == tokenize.NUMBER:
        return "0"
    if kind == tokenize.STRING or kind in _fstring_kinds():
        return "S"
    return text


def _fstring_kinds() -> set[int]:
    """Python 3.12 splits f-strings into tokens of their own: they are strings all the same."""
    return {getattr(tokenize, n) for n in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END") if hasattr(tokenize, n)}


def _plain_tokens(text: str) -> list[str]:
    out = []
    for word in _WORDS.findall(text):
        if word[0].isalpha() or word[0] == "_":
            out.append(word if word in KEPT_NAMES else "N")
        elif word[0].isdigit():
            out.append("0")
        elif word[0] in "\"'" and len(word) > 1:
            out.append("S")
        else:
            out.append(word)
    return out


def normal_tokens(text: str, python: bool = True) -> list[str]:
    """``text`` as token classes (module docstring); text that is not Python, or does not
    tokenize as Python, goes through the plain splitter."""
    if not python:
        return _plain_tokens(text)
    try:
        out: list[str] = []
        strings = 0  # consecutive f-string pieces count as one string
        for tok in tokenize.generate_tokens(io.StringIO(textwrap.dedent(text)).readline):
            if tok.type in _SKIP:
                continue
            klass = _klass(tok.type, tok.string)
            if tok.type in _fstring_kinds():
                strings += 1
                if tok.type != getattr(tokenize, "FSTRING_START", None):
                    continue
            out.append(klass)
        return out
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return _plain_tokens(text)


def runs(tokens: list[str], k: int = RUN) -> set[tuple[str, ...]]:
    return {tuple(tokens[i:i + k]) for i in range(len(tokens) - k + 1)}


def _covered(solution: list[str], theirs: set[tuple[str, ...]], k: int) -> int:
    covered = [False] * len(solution)
    for i in range(len(solution) - k + 1):
        if tuple(solution[i:i + k]) in theirs:
            covered[i:i + k] = [True] * k
    return sum(covered)


def share_held(solution: list[str], other: list[str], k: int = RUN) -> float:
    """The share of ``solution``'s tokens covered by runs of ``k`` that ``other`` also has."""
    return _covered(solution, runs(other, k), k) / len(solution) if solution else 0.0


def solution_regions(text: str, filename: str) -> list[str]:
    """The text of each solution region of a course file."""
    regions: list[str] = []
    current: list[str] | None = None
    for line, where in lines(text, filename, SOLUTION):
        if where == "begin":
            current = []
        elif where == "end" and current is not None:
            regions.append("".join(current))
            current = None
        elif where == "inside" and current is not None:
            current.append(line)
    return regions


def task_solutions(root: Path) -> dict[str, list[list[str]]]:
    """task id -> the token classes of each of its solution regions (course copy)."""
    from autograder.grading.grade import manifest_of
    out: dict[str, list[list[str]]] = {}
    for task in manifest_of(root).tasks:
        regions = []
        for rel in task.edit:
            text = (root / "assignments" / rel).read_text(encoding="utf-8")
            regions += [normal_tokens(r) for r in solution_regions(text, rel)]
        out[task.id] = regions
    return out


def _notebook_code(text: str) -> str | None:
    try:
        nb = json.loads(text)
        return "\n".join("".join(c.get("source", "")) for c in nb.get("cells", []))
    except (ValueError, AttributeError, TypeError):
        return None


def file_tokens(name: str, data: bytes) -> list[str] | None:
    """Token classes of one readable file, None when it is not text (a compiled module, an image)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "\0" in text:
        return None
    if name.endswith(".ipynb"):
        code = _notebook_code(text)
        return normal_tokens(code) if code is not None else _plain_tokens(text)
    return normal_tokens(text, python=name.endswith((".py", ".pyi")))


# what a student's own tools write into a release (never shipped); of .venv, servelab's files count
_NOT_SHIPPED = {".git", ".venv", ".hypothesis", ".pytest_cache", "__pycache__", "out"}


def _servelab_in_venv(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob(".venv/lib/python*/site-packages/servelab*/**/*"))


def readable_files(folder: Path) -> dict[str, list[str]]:
    """Every readable file under ``folder`` (``.git`` and what tools write aside), the text
    members of the wheels there (``wheels/x.whl!servelab/hw_model.pyi``), and, once ``make build``
    ran, servelab's files in ``.venv`` (stubs, metadata), as token classes."""
    out: dict[str, list[str]] = {}
    for path in [*sorted(folder.rglob("*")), *_servelab_in_venv(folder)]:
        rel = path.relative_to(folder).as_posix()
        parts = path.relative_to(folder).parts
        if not path.is_file() or path.is_symlink() or rel in out:
            continue
        if _NOT_SHIPPED & set(parts) and not (parts[0] == ".venv" and "site-packages" in parts
                                               and parts[parts.index("site-packages") + 1].startswith("servelab")):
            continue
        if path.suffix == ".whl":
            with zipfile.ZipFile(path) as z:
                for member in z.namelist():
                    tokens = file_tokens(member, z.read(member))
                    if tokens is not None:
                        out[f"{rel}!{member}"] = tokens
            continue
        tokens = file_tokens(rel, path.read_bytes())
        if tokens is not None:
            out[rel] = tokens
    return out


@dataclass(frozen=True)
class Finding:
    task: str
    file: str
    share: float  # of the task's solution tokens, in [0, 1]

    def __str__(self) -> str:
        return f"{self.file} holds {self.share:.0%} of {self.task}'s solution"


def findings(solutions: dict[str, list[list[str]]], files: dict[str, list[str]],
             limit: float = LIMIT, k: int = RUN) -> list[Finding]:
    """Every (task, file) where the file holds at least ``limit`` of the task's solution, the
    largest share first."""
    found = []
    everyone = {name: runs(tokens, k) for name, tokens in files.items()}
    for task, regions in solutions.items():
        total = sum(len(r) for r in regions)
        if not total:
            continue
        for name, theirs in everyone.items():
            if not theirs:
                continue
            held = sum(_covered(r, theirs, k) for r in regions) / total
            if held >= limit:
                found.append(Finding(task, name, held))
    return sorted(found, key=lambda f: (-f.share, f.task, f.file))


def check_release(root: Path, folder: Path, extra: dict[str, list[str]] | None = None,
                  limit: float = LIMIT) -> list[Finding]:
    """The findings of a release folder (and of ``extra`` files, e.g. a venv's site-packages)
    against the course copy's solutions."""
    files = readable_files(folder)
    files.update(extra or {})
    return findings(task_solutions(root), files, limit)


def _raw_tokens(text: str) -> list[str]:
    """Source words and symbols as written (split by the same splitter as a binary's strings),
    without comments, layout and docstrings (a compiled module keeps its docstrings on purpose:
    help() shows them)."""
    out: list[str] = []
    previous = tokenize.NEWLINE
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in _SKIP:
            if tok.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
                previous = tok.type
            continue
        docstring = tok.type == tokenize.STRING and previous in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
        previous = tok.type
        if not docstring:
            out += _WORDS.findall(tok.string)
    return out


def printable_strings(data: bytes, least: int = 4) -> str:
    """What ``strings`` prints for a binary: its runs of at least ``least`` printable bytes, one a line."""
    return "\n".join(m.decode("ascii") for m in re.findall(rb"[\x20-\x7e\t]{%d,}" % least, data))


def source_runs_in_binary(source: str, binary: bytes, k: int = RUN, shown: str = "") -> list[str]:
    """The runs of ``k`` source words and symbols (docstrings, comments and layout aside) that
    appear, in order, in the binary's printable strings, less those that ``shown`` (the module's
    ``.pyi`` stub: its signatures, whose annotations the module keeps for ``inspect``) already
    has: a module compiled without its source gives none; the source itself, as a "binary",
    gives every run.

    >>> src = "def area(w, h):\\n    'The area.'\\n    return w * h + 0 * (w - h) / 1.5 + max(w, h)\\n"
    >>> len(source_runs_in_binary(src, src.encode())), source_runs_in_binary(src, b"\\x7fELF area")
    (10, [])
    """
    strings = _WORDS.findall(printable_strings(binary))
    theirs = {tuple(strings[i:i + k]) for i in range(len(strings) - k + 1)}
    stub = _WORDS.findall(shown)
    theirs -= {tuple(stub[i:i + k]) for i in range(len(stub) - k + 1)}
    ours = _raw_tokens(source)
    return [" ".join(ours[i:i + k]) for i in range(len(ours) - k + 1) if tuple(ours[i:i + k]) in theirs]
