"""``grade-all``'s similarity report: which submissions' edit files look copied, for instructors.

``similarity.csv`` (beside ``gradebook.csv``, never in a results.json or anything a student
reads) lists the pairs whose files are suspiciously alike, one file of one task at a time:

* two submissions (``kind = classmate``);
* a submission and the reference solution of that file (``kind = reference``: the course
  copy's ``assignments/<edit>``);
* a submission and a module of the instructors' readable library (``kind = library``: every
  ``python/servelab/**/*.py``; the release ships it, and a student may paste from it).

The comparison is copydetect's (a maintained MOSS-like tool on PyPI: pygments tokens with every
name, string and comment normalised away, then hashed k-grams, its defaults), so renaming the
identifiers or re-wrapping the lines hides nothing. What every student starts from (the release's
stub of the file: :func:`autograder.markers.strip_solutions`) is boilerplate: its fingerprints are
dropped before comparing, so that the docstrings and signatures everyone shares count for nothing.

A pair is listed when either side's *share* reaches :data:`THRESHOLD` (0.5): the share of one
file's tokens (after the boilerplate) that also occur in the other, copydetect's similarity. Half
of a file's own code in runs of :data:`NOISE_T` or more characters of normalised code (a name is
one character there, so about a line and a half) is far above what
independent solutions of these tasks share (0.34 at most: a1's one-line formulas coincide, the
algorithms are the students' own; ``autograder/tests/test_similarity.py`` measures both kinds),
while a copy with renamed names and moved lines keeps all of it (1.0). A listed pair is a reason to
read both files, not a verdict. Files with less than :data:`MIN_TOKENS` characters of normalised
code after the boilerplate (a stub left as it was, a two-line answer) are not compared: any two look alike.
"""

from __future__ import annotations

import csv
import io
import shutil
import tempfile
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

from autograder.files import write_text_atomic
from autograder.grading.submission import SubmissionError, find_file, unpack
from autograder.markers import strip_solutions
from servelab.harness.manifest import Manifest

THRESHOLD = 0.5  # a pair is listed when either file shares this much of its own code with the other
NOISE_T = 25  # copydetect's k: matches shorter than this (characters of normalised code) are noise
# copydetect's default: every match of NOISE_T is found, a winnowing window of 1 (all k-grams
# kept). A wider window would pick the least of Python's str hashes, which are salted per
# process: the scores would change from one run to the next.
GUARANTEE_T = NOISE_T
MIN_TOKENS = 60  # files with less normalised code left after the boilerplate are not compared
REPORT = "similarity.csv"
COLUMNS = ("task", "file", "kind", "a", "b", "share_a", "share_b", "tokens")


@dataclass(frozen=True)
class Pair:
    task: str
    file: str  # the edit file, relative to assignments/
    kind: str  # classmate, reference or library
    a: str  # a submission's name
    b: str  # another submission's name, "reference", or the library module (python/...)
    share_a: float  # share of a's own tokens found in b
    share_b: float  # share of b's own tokens found in a
    tokens: int  # how much normalised code they share (copydetect's token overlap)


def _fingerprint(path: Path, text: str, boilerplate=()):
    from copydetect import CodeFingerprint  # type: ignore[import-untyped]  # the notebooks extra
    return CodeFingerprint(str(path), NOISE_T, GUARANTEE_T - NOISE_T + 1, boilerplate=list(boilerplate),
                           language="python", fp=io.StringIO(text))


def _compare(one, other) -> tuple[int, float, float]:
    from copydetect import compare_files  # type: ignore[import-untyped]
    if not one.hashes & other.hashes:
        return 0, 0.0, 0.0
    tokens, (share_one, share_other), _ = compare_files(one, other)
    return int(tokens), float(share_one), float(share_other)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None  # grading reports an unreadable file; here it is just not compared


def find_pairs(files: dict[str, Path], manifest: Manifest, root: Path,
               threshold: float = THRESHOLD) -> list[Pair]:
    """The pairs at or above ``threshold``. ``files`` maps each submission's name to the folder
    holding its files (a submission already unpacked); ``root`` is the course copy (reference
    solutions in ``assignments/``, the library in ``python/servelab/``)."""
    root = Path(root)
    pairs: list[Pair] = []
    library_prints = None
    for task in manifest.tasks:
        for rel in task.edit:
            reference = root / "assignments" / rel
            ref_text = _read(reference) if reference.is_file() else None
            stub = strip_solutions(ref_text, rel) if ref_text is not None else ""
            boilerplate = _fingerprint(Path(rel), stub).hashes if stub else set()
            prints = {}
            for name in sorted(files):
                found = find_file(files[name], rel)
                text = _read(found) if found is not None else None
                if text is None:
                    continue
                fp = _fingerprint(Path(rel), text, boilerplate)
                if fp.token_coverage >= MIN_TOKENS:
                    prints[name] = fp
            others = {}
            if ref_text is not None:
                others["reference"] = ("reference", _fingerprint(reference, ref_text, boilerplate))
            if prints:
                if library_prints is None:  # fingerprinted once, and only when a file is compared
                    library_prints = _library(root)
                others.update({lib: ("library", fp) for lib, fp in library_prints.items()})
            for a, b in combinations(sorted(prints), 2):
                pairs += _pair(task.id, rel, "classmate", a, b, prints[a], prints[b], threshold)
            for a in sorted(prints):
                for b, (kind, fp) in others.items():
                    if fp.token_coverage >= MIN_TOKENS:
                        pairs += _pair(task.id, rel, kind, a, b, prints[a], fp, threshold)
    return sorted(pairs, key=lambda p: (-max(p.share_a, p.share_b), p.task, p.file, p.a, p.b))


_LIBRARY_CACHE: dict[tuple, dict] = {}


def _library(root: Path) -> dict:
    """Fingerprints of ``python/servelab/**/*.py`` by path relative to ``root``: pygments reads
    600 kB there (seconds), so they are kept for the process while no file changes."""
    files = sorted((root / "python" / "servelab").rglob("*.py"))
    key = tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in files)
    if key not in _LIBRARY_CACHE:
        _LIBRARY_CACHE.clear()
        _LIBRARY_CACHE[key] = {p.relative_to(root).as_posix(): _fingerprint(p, t)
                               for p in files if (t := _read(p)) is not None}
    return _LIBRARY_CACHE[key]


def _pair(task: str, rel: str, kind: str, a: str, b: str, fa, fb, threshold: float) -> list[Pair]:
    tokens, share_a, share_b = _compare(fa, fb)
    if max(share_a, share_b) < threshold:
        return []
    return [Pair(task, rel, kind, a, b, round(share_a, 3), round(share_b, 3), tokens)]


def write_report(subs: list[Path], manifest: Manifest, root: Path, out: Path) -> Path:
    """Unpacks each submission (a folder or a zip, named after the student) into a temporary
    folder, finds the listed pairs and writes ``out/similarity.csv`` (rows most alike first).
    A submission that cannot be unpacked is left out (its gradebook row says why)."""
    work = Path(tempfile.mkdtemp(prefix="servelab-similarity-"))
    try:
        folders = {}
        for sub in subs:
            name = sub.stem if sub.suffix == ".zip" else sub.name
            try:
                folders[name] = unpack(sub, work / name)
            except (SubmissionError, OSError):
                continue
        pairs = find_pairs(folders, manifest, root)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(COLUMNS)
    for p in pairs:
        writer.writerow([p.task, p.file, p.kind, p.a, p.b, p.share_a, p.share_b, p.tokens])
    return write_text_atomic(Path(out) / REPORT, text.getvalue())
